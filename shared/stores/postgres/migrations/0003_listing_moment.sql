-- Listings that hold still while a change stamped before a listing's moment
-- is saved after its first page (see shared.store.listing): the latest
-- moment any listing is read as of, and each task's status time as stamped
-- (`st`) beside where it is filed (`ts`, what the listing indexes and the
-- status history order by). A status saved at or before the latest moment
-- is filed just after it, so the listing that moment belongs to places the
-- task where its history says it was then, instead of above its cursor.

ALTER TABLE tasks ADD COLUMN st double precision;  -- NULL: as `ts`

CREATE TABLE listed (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    as_of    double precision NOT NULL
);
INSERT INTO listed VALUES (true, 0);

-- The advisory lock that orders a listing's moment against the writes: a
-- write reads the moment holding it shared, a listing raises the moment
-- holding it alone, so a write either sees the new moment or committed
-- before the listing's first page was read. Per schema: the table's oid.
CREATE FUNCTION listed_lock() RETURNS bigint LANGUAGE sql STABLE
SET search_path FROM CURRENT AS $$
  SELECT (x'746e786c'::bigint << 32) | 'listed'::regclass::oid::bigint
$$;

-- Where a status stamped at p_ts is filed. Called after the write has taken
-- every row lock it needs, so a write holding the shared lock never waits on
-- another write (which could wait behind a listing waiting on this one).
CREATE FUNCTION filed_at(p_ts double precision) RETURNS double precision
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  moment double precision;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(listed_lock());
  SELECT as_of INTO moment FROM listed;
  IF p_ts <= moment THEN
    RETURN moment + 2e-6;
  END IF;
  RETURN p_ts;
END $$;

-- A listing reads as of p_as_of: raise the latest moment to it, in a
-- statement of its own (its transaction ends before the page is read).
CREATE FUNCTION listing_at(p_as_of double precision) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF (SELECT as_of FROM listed) < p_as_of THEN
    PERFORM pg_advisory_xact_lock(listed_lock());
    UPDATE listed SET as_of = greatest(as_of, p_as_of);
  END IF;
END $$;

CREATE OR REPLACE FUNCTION create_task(
    p_id text, p_doc text, p_event text, p_ts double precision, p_o text, p_c text,
    p_cj text, p_mkey text, p_supersedes text, p_now double precision,
    p_window double precision, p_log_limit bigint, p_channel text,
    OUT outcome text, OUT named text
) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  owner text;
  filed double precision;
BEGIN
  IF p_mkey IS NOT NULL THEN
    SELECT id INTO named FROM tasks
      WHERE mkey = p_mkey AND alive(expires, p_now) FOR UPDATE;
    IF named IS NOT NULL AND (named IS DISTINCT FROM p_supersedes) THEN
      outcome := 'existing';
      RETURN;
    END IF;
    -- The key moves on: from the superseded task, or from one that expired.
    -- Only from those: this statement sees tasks committed since the SELECT
    -- above, and a live one that took the key meanwhile keeps it (the INSERT
    -- below then fails on the unique key, and the caller retries, finding it).
    UPDATE tasks SET mkey = NULL
      WHERE mkey = p_mkey AND (id = p_supersedes OR NOT alive(expires, p_now));
  END IF;
  INSERT INTO contexts VALUES (p_c, p_o) ON CONFLICT (c) DO NOTHING;
  SELECT o INTO owner FROM contexts WHERE c = p_c FOR UPDATE;
  IF owner <> p_o THEN
    -- A context's owner is kept while a task of it lives.
    IF EXISTS (SELECT 1 FROM tasks
               WHERE o = owner AND c = p_c AND alive(expires, p_now)) THEN
      outcome := 'context';
      named := '';
      RETURN;
    END IF;
    UPDATE contexts SET o = p_o WHERE c = p_c;
  END IF;
  DELETE FROM events WHERE task_id = p_id;
  DELETE FROM history WHERE task_id = p_id;
  filed := filed_at(p_ts);
  INSERT INTO tasks AS t (id, doc, seq, base, state, st, ts, o, c, cj, mkey, sent)
    VALUES (p_id, p_doc, 1, 1, 'submitted', p_ts, filed, p_o, p_c, p_cj, p_mkey, p_now)
    ON CONFLICT (id) DO UPDATE SET doc = p_doc, seq = 1, base = 1, state = 'submitted',
      st = p_ts, ts = filed, o = p_o, c = p_c, cj = p_cj, mkey = p_mkey, heartbeat = NULL,
      sent = p_now, interrupted = NULL, expires = NULL;
  INSERT INTO events VALUES (p_id, 1, p_event);
  PERFORM after_write(p_id, 1, 1, 'submitted', filed, p_now, p_window, p_log_limit,
                                p_channel);
  outcome := 'created';
  named := p_id;
END $$;

CREATE OR REPLACE FUNCTION write_task(
    p_id text, p_expected bigint, p_doc text, p_state text, p_ts double precision,
    p_o text, p_c text, p_cj text, p_events text[], p_now double precision,
    p_ttl double precision, p_window double precision, p_log_limit bigint, p_channel text
) RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  n bigint := cardinality(p_events);
  was bigint;
  newest bigint;
  based bigint;
  was_state text;
  stamped double precision;
  filed double precision;
BEGIN
  IF p_expected IS NULL THEN
    -- A finished task past its TTL is gone: a save starts it afresh.
    DELETE FROM tasks WHERE id = p_id AND NOT alive(expires, p_now);
    IF FOUND THEN
      DELETE FROM events WHERE task_id = p_id;
      DELETE FROM history WHERE task_id = p_id;
    END IF;
    INSERT INTO tasks AS t (id, doc, seq, base, state, ts, o, c, cj)
      VALUES (p_id, p_doc, 0, 0, p_state, p_ts, p_o, p_c, p_cj)
      ON CONFLICT (id) DO NOTHING;
    UPDATE tasks SET seq = seq + n, cj = p_cj WHERE id = p_id
      RETURNING seq, state, coalesce(st, ts), ts INTO newest, was_state, stamped, filed;
  ELSE
    UPDATE tasks SET seq = seq + n
      WHERE id = p_id AND seq = p_expected AND alive(expires, p_now)
      RETURNING seq, state, coalesce(st, ts), ts INTO newest, was_state, stamped, filed;
    IF newest IS NULL THEN
      RETURN NULL;
    END IF;
  END IF;
  was := newest - n;
  -- A new status (or a new task) is filed anew; an unchanged one stays put.
  IF was = 0 OR was_state <> p_state OR stamped <> p_ts THEN
    filed := filed_at(p_ts);
  END IF;
  UPDATE tasks SET
      doc = coalesce(p_doc, doc),
      base = CASE WHEN p_doc IS NULL THEN base ELSE newest END,
      state = p_state, st = p_ts, ts = filed, o = p_o, c = p_c,
      heartbeat = CASE WHEN p_state = 'working' THEN p_now END,
      sent = CASE WHEN p_state = 'submitted' THEN p_now END,
      interrupted = CASE WHEN p_state IN ('input-required', 'auth-required') THEN p_now END,
      expires = CASE WHEN p_ttl > 0 THEN p_now + p_ttl ELSE expires END
    WHERE id = p_id RETURNING base INTO based;
  INSERT INTO events
    SELECT p_id, was + u.i, u.body FROM unnest(p_events) WITH ORDINALITY AS u(body, i);
  PERFORM after_write(p_id, newest, based, p_state, filed, p_now, p_window,
                                p_log_limit, p_channel);
  RETURN newest;
END $$;
