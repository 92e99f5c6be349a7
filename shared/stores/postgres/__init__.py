"""The PostgreSQL task store (`TOOLNEXUS_STORE=postgresql://...`): see docs/postgresql.md."""

from shared.stores.postgres.store import POOL_SIZE, PostgresStore, postgres_store

__all__ = ["POOL_SIZE", "PostgresStore", "postgres_store"]
