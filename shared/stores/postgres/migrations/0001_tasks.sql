-- The task store (in the schema `db upgrade` names; `toolnexus` by default):
-- tasks, their event logs, status histories, context owners,
-- the reaper's beat, and the write functions (each write one statement, so
-- the compare, the append, the index columns and the notification commit
-- together). Applied by `toolnexus-serve db upgrade`, never by a request.

CREATE TABLE tasks (
    id          text COLLATE "C" PRIMARY KEY,
    doc         text NOT NULL,               -- the JSON snapshot
    seq         bigint NOT NULL,             -- the number of the last event
    base        bigint NOT NULL,             -- the event the snapshot includes
    state       text NOT NULL,
    ts          double precision NOT NULL,   -- status time, seconds since the epoch
    o           text COLLATE "C" NOT NULL,   -- digest of the owner
    c           text COLLATE "C" NOT NULL,   -- digest of the context
    cj          text NOT NULL,               -- the contextId as JSON (for the claim)
    mkey        text COLLATE "C" UNIQUE,     -- the message key that created it
    heartbeat   double precision,            -- set while working
    sent        double precision,            -- set while submitted
    interrupted double precision,            -- set while waiting for the peer
    expires     double precision             -- set once finished, with a TTL
);
-- Partial indexes: each holds only the tasks in its state, so the reaper's
-- queries are one index range over the few tasks that could match.
CREATE INDEX tasks_stale ON tasks (heartbeat) WHERE heartbeat IS NOT NULL;
CREATE INDEX tasks_waiting ON tasks (sent) WHERE sent IS NOT NULL;
CREATE INDEX tasks_interrupted ON tasks (interrupted) WHERE interrupted IS NOT NULL;
CREATE INDEX tasks_expiring ON tasks (expires) WHERE expires IS NOT NULL;
-- ListTasks: keyset pages newest first, per owner, per context, per state.
CREATE INDEX tasks_by_owner ON tasks (o, ts DESC, id DESC);
CREATE INDEX tasks_by_context ON tasks (o, c, ts DESC, id DESC);
CREATE INDEX tasks_by_state ON tasks (o, state, ts DESC, id DESC);

CREATE TABLE events (
    task_id text COLLATE "C" NOT NULL,
    seq     bigint NOT NULL,
    body    text NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Each (status time, state) a task has had, for listings that hold still.
CREATE TABLE history (
    task_id text COLLATE "C" NOT NULL,
    seq     bigint NOT NULL,
    ts      double precision NOT NULL,
    state   text NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE contexts (
    c text COLLATE "C" PRIMARY KEY,   -- digest of the contextId
    o text COLLATE "C" NOT NULL       -- digest of its owner
);

CREATE TABLE beat (
    name text PRIMARY KEY,
    at   double precision NOT NULL
);

-- Whether a row is still alive at `now` (a finished task past its TTL reads
-- as gone until purge_expired removes it).
CREATE FUNCTION alive(expires double precision, now double precision)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT expires IS NULL OR expires > now $$;

-- The events after a task's snapshot, one JSON a line ('' when none).
CREATE FUNCTION tail(p_id text, p_base bigint)
RETURNS text LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
  SELECT coalesce(string_agg(body, E'\n' ORDER BY seq), '')
  FROM events WHERE task_id = p_id AND seq > p_base
$$;

-- After a write numbered up to p_seq: the status history, the log's trim, the
-- notification. Shared by every write.
CREATE FUNCTION after_write(
    p_id text, p_seq bigint, p_base bigint, p_state text, p_ts double precision,
    p_now double precision, p_window double precision, p_log_limit bigint, p_channel text
) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  last_ts double precision;
  last_state text;
  keep_from bigint;
BEGIN
  SELECT ts, state INTO last_ts, last_state FROM history
    WHERE task_id = p_id ORDER BY seq DESC LIMIT 1;
  IF last_state IS NULL OR last_state <> p_state OR last_ts <> p_ts THEN
    INSERT INTO history VALUES (p_id, p_seq, p_ts, p_state);
    -- Changes older than the listing window go, but the last of them stays.
    DELETE FROM history WHERE task_id = p_id AND seq < (
      SELECT max(seq) FROM history WHERE task_id = p_id AND ts < p_now - p_window);
  END IF;
  -- The log keeps the last p_log_limit events, and always those after the snapshot.
  keep_from := least(p_seq - p_log_limit, p_base);
  IF keep_from > 0 THEN
    DELETE FROM events WHERE task_id = p_id AND seq <= keep_from;
  END IF;
  IF p_channel <> '' THEN
    PERFORM pg_notify(p_channel, p_id || ' ' || p_seq);
  END IF;
END $$;

-- A new submitted task, unless its message key names a live task (other than
-- p_supersedes). Returns (outcome, named): ('created', id), ('existing', the
-- earlier task's id) or ('context', '').
CREATE FUNCTION create_task(
    p_id text, p_doc text, p_event text, p_ts double precision, p_o text, p_c text,
    p_cj text, p_mkey text, p_supersedes text, p_now double precision,
    p_window double precision, p_log_limit bigint, p_channel text,
    OUT outcome text, OUT named text
) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  owner text;
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
  INSERT INTO tasks AS t (id, doc, seq, base, state, ts, o, c, cj, mkey, sent)
    VALUES (p_id, p_doc, 1, 1, 'submitted', p_ts, p_o, p_c, p_cj, p_mkey, p_now)
    ON CONFLICT (id) DO UPDATE SET doc = p_doc, seq = 1, base = 1, state = 'submitted',
      ts = p_ts, o = p_o, c = p_c, cj = p_cj, mkey = p_mkey, heartbeat = NULL, sent = p_now,
      interrupted = NULL, expires = NULL;
  INSERT INTO events VALUES (p_id, 1, p_event);
  PERFORM after_write(p_id, 1, 1, 'submitted', p_ts, p_now, p_window, p_log_limit,
                                p_channel);
  outcome := 'created';
  named := p_id;
END $$;

-- Compare-and-append: the events numbered on from p_expected if the task's
-- last event is still p_expected (NULL: `save`, whatever is there, creating
-- the task if need be). p_doc NULL appends without a new snapshot. Returns the
-- number of the last event written, or NULL when nothing was.
CREATE FUNCTION write_task(
    p_id text, p_expected bigint, p_doc text, p_state text, p_ts double precision,
    p_o text, p_c text, p_cj text, p_events text[], p_now double precision,
    p_ttl double precision, p_window double precision, p_log_limit bigint, p_channel text
) RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  n bigint := cardinality(p_events);
  was bigint;
  newest bigint;
  based bigint;
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
      RETURNING seq INTO newest;
  ELSE
    UPDATE tasks SET seq = seq + n
      WHERE id = p_id AND seq = p_expected AND alive(expires, p_now)
      RETURNING seq INTO newest;
    IF newest IS NULL THEN
      RETURN NULL;
    END IF;
  END IF;
  was := newest - n;
  UPDATE tasks SET
      doc = coalesce(p_doc, doc),
      base = CASE WHEN p_doc IS NULL THEN base ELSE newest END,
      state = p_state, ts = p_ts, o = p_o, c = p_c,
      heartbeat = CASE WHEN p_state = 'working' THEN p_now END,
      sent = CASE WHEN p_state = 'submitted' THEN p_now END,
      interrupted = CASE WHEN p_state IN ('input-required', 'auth-required') THEN p_now END,
      expires = CASE WHEN p_ttl > 0 THEN p_now + p_ttl ELSE expires END
    WHERE id = p_id RETURNING base INTO based;
  INSERT INTO events
    SELECT p_id, was + u.i, u.body FROM unnest(p_events) WITH ORDINALITY AS u(body, i);
  PERFORM after_write(p_id, newest, based, p_state, p_ts, p_now, p_window,
                                p_log_limit, p_channel);
  RETURN newest;
END $$;

-- The worker's claim in one statement: if the task is in p_from, append the
-- status update (its text around the task's own contextId) and return the task
-- as the claim left it; otherwise as it stands. outcome: 'claimed', 'refused'
-- or 'unknown'.
CREATE FUNCTION claim_task(
    p_id text, p_from text, p_state text, p_ts double precision, p_before text,
    p_after text, p_now double precision, p_ttl double precision,
    p_window double precision, p_log_limit bigint, p_channel text,
    OUT outcome text, OUT doc text, OUT seq bigint, OUT tail text
) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  row tasks%ROWTYPE;
BEGIN
  SELECT * INTO row FROM tasks t
    WHERE t.id = p_id AND alive(t.expires, p_now) FOR UPDATE;
  IF NOT FOUND THEN
    outcome := 'unknown';
    RETURN;
  END IF;
  outcome := 'refused';
  IF row.state = p_from THEN
    PERFORM write_task(p_id, row.seq, NULL, p_state, p_ts, row.o, row.c, row.cj,
      ARRAY[p_before || row.cj || p_after], p_now, p_ttl, p_window, p_log_limit, p_channel);
    outcome := 'claimed';
  END IF;
  SELECT t.doc, t.seq, tail(t.id, t.base) INTO doc, seq, tail
    FROM tasks t WHERE t.id = p_id;
END $$;
