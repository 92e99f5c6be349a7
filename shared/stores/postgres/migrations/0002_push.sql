-- Push notifications: each task's webhook configs, the delivery cursor and
-- lease of each (task, config), and the tasks that may still have something
-- to deliver (see shared/push/contract.py).

CREATE TABLE push_configs (
    task_id   text COLLATE "C" NOT NULL,
    config_id text COLLATE "C" NOT NULL,
    body      text NOT NULL,
    PRIMARY KEY (task_id, config_id)
);

CREATE TABLE push_cursors (
    task_id   text COLLATE "C" NOT NULL,
    config_id text COLLATE "C" NOT NULL,
    delivered bigint NOT NULL,
    failures  integer NOT NULL,
    since     double precision NOT NULL,
    given_up  bigint NOT NULL,
    PRIMARY KEY (task_id, config_id)
);

CREATE TABLE push_leases (
    task_id   text COLLATE "C" NOT NULL,
    config_id text COLLATE "C" NOT NULL,
    holder    text NOT NULL,
    until     double precision NOT NULL,
    PRIMARY KEY (task_id, config_id)
);

-- pushing: still swept; forget_at: when a finished task's push state goes.
CREATE TABLE push_tasks (
    task_id   text COLLATE "C" PRIMARY KEY,
    pushing   boolean NOT NULL,
    forget_at double precision
);
CREATE INDEX push_tasks_pushing ON push_tasks (task_id) WHERE pushing;
CREATE INDEX push_tasks_forget ON push_tasks (forget_at) WHERE forget_at IS NOT NULL;

-- Adds (or replaces) a config unless the task holds p_cap others already.
CREATE FUNCTION push_put(p_task text, p_config text, p_body text, p_cap integer)
RETURNS boolean LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  -- One task's configs change one at a time: the count below stays true.
  PERFORM pg_advisory_xact_lock(hashtext('push:' || p_task));
  IF NOT EXISTS (SELECT 1 FROM push_configs WHERE task_id = p_task AND config_id = p_config)
     AND (SELECT count(*) FROM push_configs WHERE task_id = p_task) >= p_cap THEN
    RETURN false;
  END IF;
  INSERT INTO push_configs VALUES (p_task, p_config, p_body)
    ON CONFLICT (task_id, config_id) DO UPDATE SET body = excluded.body;
  INSERT INTO push_tasks VALUES (p_task, true, NULL)
    ON CONFLICT (task_id) DO UPDATE SET pushing = true, forget_at = NULL;
  RETURN true;
END $$;
