-- Push state is written once over the store's primitives, as on every store
-- (shared/push/documents.py): each task's webhook configs and delivery cursors
-- are one small document, `push:<digest of the task id>`, and the tasks
-- still swept are members of the scored index 'pushing'. Leases are
-- documents that live as long as the lease; a lease held while the upgrade
-- runs is not carried over (its delivery finds the pair free and takes it).

CREATE TABLE indexes (
    name   text COLLATE "C" NOT NULL,
    member text COLLATE "C" NOT NULL,
    score  double precision NOT NULL,
    PRIMARY KEY (name, member)
);
CREATE INDEX indexes_scored ON indexes (name, score, member);

WITH tasks AS (
    SELECT task_id FROM push_configs UNION SELECT task_id FROM push_cursors
), configs AS (
    SELECT task_id, jsonb_object_agg(config_id, body::jsonb) AS held
    FROM push_configs GROUP BY task_id
), cursors AS (
    SELECT task_id, jsonb_object_agg(config_id, jsonb_build_object(
        'delivered', delivered, 'failures', failures, 'since', since,
        'given_up', given_up)) AS held
    FROM push_cursors GROUP BY task_id
)
INSERT INTO documents (name, version, body, expires)
SELECT 'push:' || encode(sha256(convert_to('push' || chr(31) || t.task_id, 'UTF8')), 'hex'),
       gen_random_uuid()::text,
       jsonb_build_object(
           'configs', coalesce(c.held, '{}'::jsonb),
           'cursors', coalesce(u.held, '{}'::jsonb))
       || CASE WHEN p.pushing IS FALSE AND p.forget_at IS NOT NULL
               THEN jsonb_build_object('forget_at', p.forget_at) ELSE '{}'::jsonb END,
       CASE WHEN p.pushing IS FALSE THEN p.forget_at END
FROM tasks t
LEFT JOIN configs c ON c.task_id = t.task_id
LEFT JOIN cursors u ON u.task_id = t.task_id
LEFT JOIN push_tasks p ON p.task_id = t.task_id
ON CONFLICT (name) DO NOTHING;

INSERT INTO indexes (name, member, score)
SELECT 'pushing', task_id, 0 FROM push_tasks WHERE pushing
ON CONFLICT DO NOTHING;

DROP FUNCTION push_put(text, text, text, integer);
DROP TABLE push_configs;
DROP TABLE push_cursors;
DROP TABLE push_leases;
DROP TABLE push_tasks;
