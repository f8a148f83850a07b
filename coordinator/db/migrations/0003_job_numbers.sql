-- A lease runs several jobs, one at a time, numbered 1, 2, ... (0002 allowed one per lease):
-- `jobs` keeps each lease's current job with its number, `earlier_jobs` the ones it replaced,
-- and every job event names the job it belongs to.
ALTER TABLE jobs ADD COLUMN number integer NOT NULL DEFAULT 1 CHECK (number >= 1);

CREATE TABLE earlier_jobs (
    lease         text NOT NULL,
    number        integer NOT NULL,
    spec          jsonb NOT NULL,
    gpus_per_node integer,
    client        text NOT NULL,
    signature     text NOT NULL,  -- the client's, over gpunet.protocol.job_message with this number
    submitted_at  timestamptz NOT NULL,
    replaced_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lease, number)
);

ALTER TABLE job_events ADD COLUMN job_number integer NOT NULL DEFAULT 1;
CREATE INDEX job_events_job ON job_events (lease, job_number, node_key, id);
