-- What the coordinator itself decides and hears (not derived from the chain): placements and
-- their reasons, the clients' job specs, job status and logs, usage reports as workers signed
-- them, the latest checkpoint of each lease, and the faults it recorded.

-- One row per lease the scheduler has looked at: where it stands and why.
CREATE TABLE placements (
    lease       text PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('waiting', 'assigning', 'placed', 'failed', 'ended')),
    reason      text NOT NULL DEFAULT '',
    nodes       text[] NOT NULL DEFAULT '{}',  -- node keys in rank order, once placed
    signature   text,                           -- the assign_lease transaction
    opened_seen timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The job a client attached to its lease, with the client's signature over it. A lease is
-- placed once its job is known (the job says how its GPUs may split over nodes).
CREATE TABLE jobs (
    lease        text PRIMARY KEY,
    spec         jsonb NOT NULL,
    -- equal shares of this many GPUs per node (a cluster shape for torch.distributed); NULL: fewest nodes
    gpus_per_node integer CHECK (gpus_per_node BETWEEN 1 AND 16),
    client       text NOT NULL,
    signature    text NOT NULL,
    submitted_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Status changes and log lines from the workers, in arrival order.
CREATE TABLE job_events (
    id        bigserial PRIMARY KEY,
    lease     text NOT NULL,
    node_key  text NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('status', 'log')),
    state     text,
    stream    text,
    line      text,
    exit_code integer,
    detail    text,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX job_events_lease ON job_events (lease, id);

-- Usage reports exactly as the nodes signed them; the chain's seq decides what is settled.
CREATE TABLE usage_reports (
    lease        text NOT NULL,
    node_key     text NOT NULL,
    seq          numeric(20, 0) NOT NULL,
    period_start bigint NOT NULL,
    period_end   bigint NOT NULL,
    gpu_seconds  numeric(20, 0) NOT NULL,
    signature    text NOT NULL,  -- the node's Ed25519 signature over the canonical message (base58)
    simulated    boolean NOT NULL,
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'settled', 'already_settled', 'refused')),
    reason       text NOT NULL DEFAULT '',
    settled_by   text,           -- the settle_usage transaction
    received_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lease, node_key, seq)
);
CREATE INDEX usage_reports_pending ON usage_reports (received_at) WHERE status = 'pending';

-- The latest checkpoint of each lease's job, to restore it on another node.
CREATE TABLE checkpoints (
    lease       text PRIMARY KEY,
    node_key    text NOT NULL,
    files       jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Faults the coordinator observed, with the evidence whose SHA-256 went on chain.
CREATE TABLE faults (
    id            bigserial PRIMARY KEY,
    node_key      text NOT NULL,
    lease         text,
    kind          text NOT NULL,
    evidence      jsonb NOT NULL,
    evidence_hash text NOT NULL,
    slash_signature text,
    recorded_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX faults_node ON faults (node_key, id);
