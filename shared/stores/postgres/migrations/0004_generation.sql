-- The worker's claim stamps its status update with the task's generation
-- (one more than the latest event that carries one; 0 when the task keeps
-- none or it is unknown). The event's text comes in three pieces: before
-- the task's contextId, between it and the generation, and after.

DROP FUNCTION claim_task(text, text, text, double precision, text, text,
  double precision, double precision, double precision, bigint, text);

CREATE FUNCTION claim_task(
    p_id text, p_from text, p_state text, p_ts double precision, p_before text,
    p_between text, p_after text, p_now double precision, p_ttl double precision,
    p_window double precision, p_log_limit bigint, p_channel text,
    OUT outcome text, OUT doc text, OUT seq bigint, OUT tail text
) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  row tasks%ROWTYPE;
  kept bigint;
BEGIN
  SELECT * INTO row FROM tasks t
    WHERE t.id = p_id AND alive(t.expires, p_now) FOR UPDATE;
  IF NOT FOUND THEN
    outcome := 'unknown';
    RETURN;
  END IF;
  outcome := 'refused';
  IF row.state = p_from THEN
    -- A message event carries no generation: the newest event that does says.
    SELECT (e.body::json->>'generation')::bigint INTO kept FROM events e
      WHERE e.task_id = p_id AND e.body::json->>'generation' IS NOT NULL
      ORDER BY e.seq DESC LIMIT 1;
    IF kept IS NULL OR kept <= 0 THEN
      kept := 0;
    ELSE
      kept := kept + 1;
    END IF;
    PERFORM write_task(p_id, row.seq, NULL, p_state, p_ts, row.o, row.c, row.cj,
      ARRAY[p_before || row.cj || p_between || kept::text || p_after], p_now, p_ttl,
      p_window, p_log_limit, p_channel);
    outcome := 'claimed';
  END IF;
  SELECT t.doc, t.seq, tail(t.id, t.base) INTO doc, seq, tail
    FROM tasks t WHERE t.id = p_id;
END $$;
