-- The task log in the tables the SQLite store keeps, read and written by
-- the SQL both stores share (shared/stores/sql/tasks.py, listing.py):
-- the owner and the context (as their digests, as before: text holds no NUL
-- character; shared/stores/sql/dialects.py), the time indexes as
-- members of the scored indexes 'working', 'waiting' and 'interrupted',
-- the listing moment and the reaper's beat as rows of `times`, and the
-- counts a listing totals by owner, context and state. The write functions
-- go: a write is the shared statements in one transaction.

DROP TRIGGER counted_in ON tasks;
DROP TRIGGER recounted ON tasks;
DROP TRIGGER counted_out ON tasks;
DROP FUNCTION create_task(text, text, text, double precision, text, text, text, text, text,
  double precision, double precision, bigint, text);
DROP FUNCTION write_task(text, bigint, text, text, double precision, text, text, text, text[],
  double precision, double precision, double precision, bigint, text);
DROP FUNCTION claim_task(text, text, text, double precision, text, text, text,
  double precision, double precision, double precision, bigint, text);
DROP FUNCTION after_write(text, bigint, bigint, text, double precision, double precision,
  double precision, bigint, text);
DROP FUNCTION tail(text, bigint);
DROP FUNCTION alive(double precision, double precision);
DROP FUNCTION filed_at(double precision);
DROP FUNCTION listing_at(double precision);
DROP FUNCTION listed_lock();
DROP FUNCTION counts_fold();
DROP FUNCTION counted();
DROP FUNCTION recounted();

-- No write while the tables change (a write of an earlier release would
-- call the functions just dropped, and fail).
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE tasks RENAME COLUMN o TO owner;
ALTER TABLE tasks RENAME COLUMN c TO context;
ALTER TABLE tasks ADD COLUMN lineage integer NOT NULL DEFAULT 0;

INSERT INTO indexes (name, member, score)
  SELECT 'working', id, heartbeat FROM tasks WHERE heartbeat IS NOT NULL
  UNION ALL SELECT 'waiting', id, sent FROM tasks WHERE sent IS NOT NULL
  UNION ALL SELECT 'interrupted', id, interrupted FROM tasks WHERE interrupted IS NOT NULL
ON CONFLICT (name, member) DO UPDATE SET score = excluded.score;

DROP INDEX tasks_by_owner, tasks_by_context, tasks_by_state;
ALTER TABLE tasks
  DROP COLUMN cj, DROP COLUMN heartbeat, DROP COLUMN sent, DROP COLUMN interrupted, DROP COLUMN st;
-- What a listing reads, whole in its index: a page and its count touch no task's row.
CREATE INDEX tasks_by_owner ON tasks (owner, ts, id) INCLUDE (state, expires);
CREATE INDEX tasks_by_context ON tasks (owner, context, ts, id) INCLUDE (state, expires);

ALTER TABLE contexts RENAME COLUMN c TO context;
ALTER TABLE contexts RENAME COLUMN o TO owner;

ALTER TABLE beat RENAME TO times;
INSERT INTO times SELECT 'listed', as_of FROM listed
  ON CONFLICT (name) DO UPDATE SET at = excluded.at;
DROP TABLE listed;

-- How many tasks each owner has, in each context and state ('*' for every
-- one, else '=' and the context or state). Each server process (`stripe`:
-- its pid) adds to rows of its own, so two writes never wait on one count
-- row; a count is the sum over its rows. The reaper's purge folds the rows
-- into stripe 0 (`counts_fold`), skipping any a write holds.
DROP TABLE counts;
CREATE TABLE counts (
    owner   text COLLATE "C" NOT NULL,
    context text COLLATE "C" NOT NULL,
    state   text COLLATE "C" NOT NULL,
    stripe  integer NOT NULL,
    n       bigint NOT NULL,
    PRIMARY KEY (owner, context, state, stripe)
);

-- Per statement, as tasks come (the trigger's argument 1) and go (-1).
CREATE FUNCTION counted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO counts AS k (owner, context, state, stripe, n)
    SELECT t.owner, key.context, key.state, pg_backend_pid(), TG_ARGV[0]::bigint * count(*)
    FROM changed t CROSS JOIN LATERAL (VALUES
      ('*', '*'), ('*', '=' || t.state), ('=' || t.context, '*'),
      ('=' || t.context, '=' || t.state)) AS key(context, state)
    GROUP BY t.owner, key.context, key.state
  ON CONFLICT (owner, context, state, stripe) DO UPDATE SET n = k.n + excluded.n;
  RETURN NULL;
END $$;

-- Per row, as a task changes state (a task's owner and context never change).
CREATE FUNCTION recounted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO counts AS k VALUES
    (NEW.owner, '*', '=' || OLD.state, pg_backend_pid(), -1),
    (NEW.owner, '=' || NEW.context, '=' || OLD.state, pg_backend_pid(), -1),
    (NEW.owner, '*', '=' || NEW.state, pg_backend_pid(), 1),
    (NEW.owner, '=' || NEW.context, '=' || NEW.state, pg_backend_pid(), 1)
  ON CONFLICT (owner, context, state, stripe) DO UPDATE SET n = k.n + excluded.n;
  RETURN NULL;
END $$;

CREATE TRIGGER counted_in AFTER INSERT ON tasks REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION counted('1');
CREATE TRIGGER recounted AFTER UPDATE OF state ON tasks FOR EACH ROW
  WHEN (OLD.state IS DISTINCT FROM NEW.state)
  EXECUTE FUNCTION recounted();
CREATE TRIGGER counted_out AFTER DELETE ON tasks REFERENCING OLD TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION counted('-1');

INSERT INTO counts (owner, context, state, stripe, n)
  SELECT owner, key.context, key.state, 0, count(*)
  FROM tasks CROSS JOIN LATERAL (VALUES
    ('*', '*'), ('*', '=' || state), ('=' || context, '*'),
    ('=' || context, '=' || state)) AS key(context, state)
  GROUP BY owner, key.context, key.state;

-- The stripes' rows folded into stripe 0, and the counts that fell to
-- zero dropped; rows a write holds are left for the next fold, and one
-- fold runs at a time (the lock: per schema, the table's oid).
CREATE FUNCTION counts_fold() RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  zero_owner text[];
  zero_context text[];
  zero_state text[];
BEGIN
  IF NOT pg_try_advisory_xact_lock((x'746e7863'::bigint << 32) | 'counts'::regclass::oid::bigint)
  THEN
    RETURN;
  END IF;
  WITH taken AS (
    DELETE FROM counts WHERE (owner, context, state, stripe) IN (
      SELECT owner, context, state, stripe FROM counts WHERE stripe <> 0 LIMIT 10000
      FOR UPDATE SKIP LOCKED)
    RETURNING owner, context, state, n)
  , folded AS (
    INSERT INTO counts AS k (owner, context, state, stripe, n)
      SELECT owner, context, state, 0, sum(n) FROM taken GROUP BY owner, context, state
    ON CONFLICT (owner, context, state, stripe) DO UPDATE SET n = k.n + excluded.n
    RETURNING owner, context, state, n)
  SELECT array_agg(owner), array_agg(context), array_agg(state)
    INTO zero_owner, zero_context, zero_state FROM folded WHERE n = 0;
  DELETE FROM counts WHERE stripe = 0 AND n = 0 AND (owner, context, state) IN (
    SELECT * FROM unnest(zero_owner, zero_context, zero_state));
END $$;
