"""SQLite under the stores: a database file shared by the processes of one
host (`shared.stores.sqlite.database`), and the store primitives over it."""
