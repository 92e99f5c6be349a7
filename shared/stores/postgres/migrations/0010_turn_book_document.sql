-- The turn book is a small document, as on every store that keeps it in a
-- document (shared/owners/book.py, DocumentBook): its row moves into
-- `documents` under the name 'turn-book', whole, and its table goes. A write
-- that takes a task out of flight (finished, or waiting for the peer) still
-- takes it out of the book's flight in the same statement, now in that
-- document, with a fresh version so that a step that read it before writes
-- nothing over it.

INSERT INTO documents (name, version, body, expires)
  SELECT 'turn-book', gen_random_uuid()::text, state, NULL FROM turn_book WHERE id
  ON CONFLICT (name) DO NOTHING;
DROP TABLE turn_book;

CREATE OR REPLACE FUNCTION after_write(
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
  IF p_state NOT IN ('submitted', 'working') THEN
    UPDATE documents SET body = body #- ARRAY['flight', p_id], version = gen_random_uuid()::text
      WHERE name = 'turn-book' AND body -> 'flight' ? p_id;
  END IF;
  IF p_channel <> '' THEN
    PERFORM pg_notify(p_channel, p_id || ' ' || p_seq);
  END IF;
END $$;
