-- Rewards (gpunet.reward_epoch, coordinator/rewards.py): the uptime the coordinator observed, at
-- fixed sample instants, and each epoch's inputs and root as built and posted. The API publishes
-- both so that anyone can rebuild an epoch's tree (`gpunet rewards audit EPOCH`).

-- One row per sample instant the coordinator observed the fleet at (none while it was blind: its
-- own stall or a database outage is no node's downtime, and no node's uptime either).
CREATE TABLE reward_samples (
    at  bigint PRIMARY KEY  -- unix seconds, a multiple of the sample period
);

-- The nodes seen online by their heartbeats at a sample instant, with what the ledger said of them then.
CREATE TABLE reward_uptime (
    at                 bigint NOT NULL REFERENCES reward_samples (at),
    node_key           text NOT NULL,
    verification_tier  integer NOT NULL,  -- the tier valid at `at` (0: none, or it had run out)
    jailed             boolean NOT NULL,
    PRIMARY KEY (at, node_key)
);
CREATE INDEX reward_uptime_node ON reward_uptime (node_key, at);

CREATE TABLE reward_epochs (
    epoch      bigint PRIMARY KEY,
    inputs     jsonb NOT NULL,          -- gpunet.reward_epoch.EpochInputs, as the tree was built from
    root       text NOT NULL,           -- hex
    total      numeric(20, 0) NOT NULL,
    leaves     integer NOT NULL,
    posted     text,                    -- the post_reward_root transaction (NULL: not landed yet)
    credited   boolean NOT NULL DEFAULT false,  -- every leaf's pool credited (claims cranked)
    built_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
