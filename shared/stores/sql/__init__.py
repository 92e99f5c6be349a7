"""What the SQL stores (PostgreSQL, SQLite) share: the SQL of the small
documents and the scored indexes, written once, and the few differences
between the two databases (`dialects`)."""
