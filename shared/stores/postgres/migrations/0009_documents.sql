-- Small documents (shared/documents.py): a JSON value under a name,
-- changed only by compare-and-set on its version (a fresh token at every
-- write), gone once `expires` (seconds since the epoch, by the database's
-- clock) has passed. The features that keep state of their own write it
-- here, the same way on every store (shared/stores/postgres/documents.py).
--
-- The send limits keep their buckets and reserved ids in documents now
-- (shared/owners/ledger.py): their own tables and functions go. What they
-- held is a window of recent sends: after the upgrade each owner starts
-- with a full bucket and no reserved ids.

CREATE TABLE documents (
    name    text COLLATE "C" PRIMARY KEY,
    version text NOT NULL,
    body    jsonb NOT NULL,
    expires double precision
);
CREATE INDEX documents_expiring ON documents (expires) WHERE expires IS NOT NULL;

DROP FUNCTION owner_take(text, double precision, double precision);
DROP FUNCTION owner_reserve(text, text, integer);
DROP TABLE owner_buckets;
DROP TABLE owner_active;
