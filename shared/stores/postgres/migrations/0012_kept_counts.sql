-- How many tasks each owner has, and in each state, kept as the tasks are
-- written: ListTasks' total without counting the owner's tasks (a count of
-- a context's tasks, which are few, still reads its index). `state` is '*'
-- (every state) or '=' and the state.
--
-- Each server process (`stripe`: its pid) adds to rows of its own, so two
-- writes never wait on one count row, and never lock rows in an order that
-- could deadlock; a count is the sum over its rows. The reaper's purge
-- folds the rows into stripe 0 (`counts_fold`), skipping any a write holds.

CREATE TABLE counts (
    o      text COLLATE "C" NOT NULL,
    state  text COLLATE "C" NOT NULL,
    stripe integer NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (o, state, stripe)
);

-- Per statement, as tasks come (the trigger's argument 1) and go (-1): a
-- statement that inserts or deletes many tasks (a purge) is one change of
-- each count.
CREATE FUNCTION counted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO counts AS k (o, state, stripe, n)
    SELECT t.o, key.state, pg_backend_pid(), TG_ARGV[0]::bigint * count(*)
    FROM changed t CROSS JOIN LATERAL (VALUES ('*'), ('=' || t.state)) AS key(state)
    GROUP BY t.o, key.state
  ON CONFLICT (o, state, stripe) DO UPDATE SET n = k.n + excluded.n;
  RETURN NULL;
END $$;

-- Per row, as a task changes state (only a state's change fires it).
CREATE FUNCTION recounted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF OLD.o = NEW.o THEN
    INSERT INTO counts AS k VALUES
      (NEW.o, '=' || OLD.state, pg_backend_pid(), -1), (NEW.o, '=' || NEW.state, pg_backend_pid(), 1)
    ON CONFLICT (o, state, stripe) DO UPDATE SET n = k.n + excluded.n;
  ELSE
    INSERT INTO counts AS k VALUES
      (OLD.o, '*', pg_backend_pid(), -1), (OLD.o, '=' || OLD.state, pg_backend_pid(), -1)
    ON CONFLICT (o, state, stripe) DO UPDATE SET n = k.n - 1;
    INSERT INTO counts AS k VALUES
      (NEW.o, '*', pg_backend_pid(), 1), (NEW.o, '=' || NEW.state, pg_backend_pid(), 1)
    ON CONFLICT (o, state, stripe) DO UPDATE SET n = k.n + 1;
  END IF;
  RETURN NULL;
END $$;

-- No write between the triggers and the count of the tasks already here.
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
CREATE TRIGGER counted_in AFTER INSERT ON tasks REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION counted('1');
CREATE TRIGGER recounted AFTER UPDATE OF o, state ON tasks FOR EACH ROW
  WHEN (OLD.o IS DISTINCT FROM NEW.o OR OLD.state IS DISTINCT FROM NEW.state)
  EXECUTE FUNCTION recounted();
CREATE TRIGGER counted_out AFTER DELETE ON tasks REFERENCING OLD TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION counted('-1');

INSERT INTO counts (o, state, stripe, n)
  SELECT o, key.state, 0, count(*)
  FROM tasks CROSS JOIN LATERAL (VALUES ('*'), ('=' || state)) AS key(state)
  GROUP BY o, key.state;

-- The stripes' rows folded into stripe 0, and the counts that fell to
-- zero dropped; rows a write holds are left for the next fold, and one
-- fold runs at a time (the lock: per schema, the table's oid).
CREATE FUNCTION counts_fold() RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  zero_o text[];
  zero_state text[];
BEGIN
  IF NOT pg_try_advisory_xact_lock((x'746e7863'::bigint << 32) | 'counts'::regclass::oid::bigint)
  THEN
    RETURN;
  END IF;
  WITH taken AS (
    DELETE FROM counts WHERE (o, state, stripe) IN (
      SELECT o, state, stripe FROM counts WHERE stripe <> 0 LIMIT 10000
      FOR UPDATE SKIP LOCKED)
    RETURNING o, state, n),
  folded AS (
    INSERT INTO counts AS k (o, state, stripe, n)
      SELECT o, state, 0, sum(n) FROM taken GROUP BY o, state
    ON CONFLICT (o, state, stripe) DO UPDATE SET n = k.n + excluded.n
    RETURNING o, state, n)
  SELECT array_agg(o), array_agg(state) INTO zero_o, zero_state FROM folded WHERE n = 0;
  DELETE FROM counts
    WHERE stripe = 0 AND n = 0 AND (o, state) IN (SELECT * FROM unnest(zero_o, zero_state));
END $$;
