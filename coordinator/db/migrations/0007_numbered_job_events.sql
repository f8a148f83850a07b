-- Job status and log lines are numbered by the worker agent that sent them (origin: one random id
-- per agent process; n: 1, 2, ... in the order sent). A worker sends again what the coordinator
-- did not confirm (its database was down, the session dropped): the same (node, origin, n) is
-- recorded once.
ALTER TABLE job_events ADD COLUMN origin text;
ALTER TABLE job_events ADD COLUMN n bigint;
CREATE UNIQUE INDEX job_events_numbered ON job_events (node_key, origin, n) WHERE n IS NOT NULL;
