-- Per-owner send limits (shared/owners/admission.py): each owner's token
-- bucket, and the ids of the tasks it has reserved a slot for among its
-- unfinished ones. Owners are named by their digest; times are the
-- database's clock, so front ends with skewed clocks agree.

CREATE TABLE owner_buckets (
    o      text COLLATE "C" PRIMARY KEY,
    tokens double precision NOT NULL,
    at     double precision NOT NULL
);

CREATE TABLE owner_active (
    o       text COLLATE "C" NOT NULL,
    task_id text COLLATE "C" NOT NULL,
    since   double precision NOT NULL,
    PRIMARY KEY (o, task_id)
);

-- Takes one token from p_o's bucket (p_size tokens, refilled at p_rate a
-- second, full when first used): 0 when taken, else the seconds until one
-- is free (nothing taken). The row lock orders the takes of one owner.
CREATE FUNCTION owner_take(p_o text, p_rate double precision, p_size double precision)
RETURNS double precision LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  have double precision;
  last double precision;
  t_now double precision;
BEGIN
  INSERT INTO owner_buckets VALUES (p_o, p_size, 0) ON CONFLICT (o) DO NOTHING;
  SELECT b.tokens, b.at INTO have, last FROM owner_buckets b WHERE b.o = p_o FOR UPDATE;
  t_now := extract(epoch FROM clock_timestamp());  -- read once the row is ours
  have := least(p_size, have + greatest(0, t_now - last) * p_rate);
  IF have < 1 - 1e-9 THEN
    RETURN (1 - have) / p_rate;
  END IF;
  UPDATE owner_buckets SET tokens = greatest(0, have - 1), at = greatest(last, t_now)
    WHERE o = p_o;
  RETURN 0;
END $$;

-- Reserves a slot for p_task among p_o's unfinished tasks unless they number
-- p_cap already: no rows when reserved (or held already), else every held
-- id with the seconds since it was reserved. An advisory lock per owner
-- (and per schema: the table's oid) makes the count and the insert one step.
CREATE FUNCTION owner_reserve(p_o text, p_task text, p_cap integer)
RETURNS TABLE (held text, age double precision)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  t_now double precision;
BEGIN
  PERFORM pg_advisory_xact_lock('owner_active'::regclass::oid::integer, hashtext(p_o));
  t_now := extract(epoch FROM clock_timestamp());
  IF EXISTS (SELECT 1 FROM owner_active a WHERE a.o = p_o AND a.task_id = p_task) THEN
    RETURN;
  END IF;
  IF (SELECT count(*) FROM owner_active a WHERE a.o = p_o) < p_cap THEN
    INSERT INTO owner_active VALUES (p_o, p_task, t_now);
    RETURN;
  END IF;
  RETURN QUERY SELECT a.task_id::text, t_now - a.since FROM owner_active a WHERE a.o = p_o;
END $$;
