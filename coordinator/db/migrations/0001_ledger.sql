-- The ledger: every gpunet event indexed from the chain, the tables derived from them, and
-- the indexer's cursor. Token amounts are u64 base units: numeric(20, 0), never float.

CREATE TABLE transactions (
    signature   text PRIMARY KEY,
    -- The order transactions were indexed in, which is chain order (oldest first).
    seq         bigserial UNIQUE NOT NULL,
    slot        bigint NOT NULL,
    block_time  bigint,
    failed      boolean NOT NULL,
    event_count integer NOT NULL,
    -- `Program data:` lines not taken as gpunet events: another program's, or malformed.
    lines_skipped integer NOT NULL,
    indexed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    signature   text NOT NULL REFERENCES transactions (signature),
    event_index integer NOT NULL,
    slot        bigint NOT NULL,
    block_time  bigint,
    name        text NOT NULL,
    data        jsonb NOT NULL,
    -- The event's `lease` / `provider` field when it has one (what the audit selects by).
    lease       text,
    provider    text,
    UNIQUE (signature, event_index)
);
CREATE INDEX events_name ON events (name, id);
CREATE INDEX events_lease ON events (lease, id) WHERE lease IS NOT NULL;
CREATE INDEX events_provider ON events (provider, id) WHERE provider IS NOT NULL;

-- One row: where the indexer stands, and its counters (shared with the API's /metrics).
CREATE TABLE indexer_state (
    id                   boolean PRIMARY KEY DEFAULT true CHECK (id),
    -- The chain this ledger indexes: set on the first pass, and a node on another chain is refused.
    genesis_hash         text,
    cursor_signature     text,
    cursor_slot          bigint,
    -- Every program transaction up to this slot is indexed (seen at `synced_at`).
    synced_slot          bigint,
    synced_at            timestamptz,
    events_indexed       bigint NOT NULL DEFAULT 0,
    transactions_indexed bigint NOT NULL DEFAULT 0,
    failed_transactions_skipped bigint NOT NULL DEFAULT 0,
    lines_skipped        bigint NOT NULL DEFAULT 0,
    backfill_runs        bigint NOT NULL DEFAULT 0,
    reconnects           bigint NOT NULL DEFAULT 0
);
INSERT INTO indexer_state DEFAULT VALUES;

CREATE TABLE providers (
    provider          text PRIMARY KEY,
    authority         text NOT NULL,
    staked            numeric(20, 0) NOT NULL,
    bonded            numeric(20, 0) NOT NULL,
    unbonding         numeric(20, 0) NOT NULL,
    unbonding_ends_at bigint NOT NULL,
    slashed           numeric(20, 0) NOT NULL,
    earned            numeric(20, 0) NOT NULL,
    node_count        integer NOT NULL,
    signature         text NOT NULL  -- the last transaction that changed the row
);
CREATE INDEX providers_authority ON providers (authority);

-- Stake history: every movement of a provider's stake, with the position after it.
CREATE TABLE stake_changes (
    signature   text NOT NULL,
    event_index integer NOT NULL,
    provider    text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('staked', 'unstake_requested', 'unstake_withdrawn', 'slashed')),
    amount      numeric(20, 0) NOT NULL,
    staked      numeric(20, 0) NOT NULL,
    unbonding   numeric(20, 0) NOT NULL,
    slot        bigint NOT NULL,
    PRIMARY KEY (signature, event_index)
);
CREATE INDEX stake_changes_provider ON stake_changes (provider, slot);

CREATE TABLE nodes (
    node               text PRIMARY KEY,
    provider           text NOT NULL,
    node_key           text NOT NULL,
    gpu_model          integer NOT NULL,
    gpu_count          integer NOT NULL,
    vram_gb            integer NOT NULL,
    region             integer NOT NULL,
    price_per_gpu_hour numeric(20, 0) NOT NULL,
    inventory_hash     text NOT NULL,
    bonded_stake       numeric(20, 0) NOT NULL,
    gpus_leased        integer NOT NULL,
    jailed             boolean NOT NULL,
    jail_ends_at       bigint NOT NULL,
    registered         boolean NOT NULL,
    signature          text NOT NULL
);
CREATE INDEX nodes_provider ON nodes (provider);

CREATE TABLE leases (
    lease                  text PRIMARY KEY,
    client                 text NOT NULL,
    lease_id               numeric(20, 0) NOT NULL,
    gpu_model              integer NOT NULL,
    min_vram_gb            integer NOT NULL,
    gpu_count              integer NOT NULL,
    region                 integer NOT NULL,
    max_price_per_gpu_hour numeric(20, 0) NOT NULL,
    duration_seconds       bigint NOT NULL,
    status                 text NOT NULL CHECK (status IN ('open', 'active', 'closed')),
    started_at             bigint NOT NULL,
    deposited              numeric(20, 0) NOT NULL,
    paid                   numeric(20, 0) NOT NULL,
    fees                   numeric(20, 0) NOT NULL,
    refunded               numeric(20, 0) NOT NULL,
    nodes                  text[] NOT NULL,  -- node accounts in assignment order
    signature              text NOT NULL
);
CREATE INDEX leases_client ON leases (client);

CREATE TABLE assignments (
    lease              text NOT NULL,
    node               text NOT NULL,
    node_key           text NOT NULL,
    provider           text NOT NULL,
    gpus               integer NOT NULL,
    price_per_gpu_hour numeric(20, 0) NOT NULL,
    last_seq           numeric(20, 0) NOT NULL,
    settled_until      bigint NOT NULL,
    gpu_seconds        numeric(20, 0) NOT NULL,
    active             boolean NOT NULL,
    signature          text NOT NULL,
    PRIMARY KEY (lease, node)
);
CREATE INDEX assignments_node ON assignments (node);

CREATE TABLE settlements (
    signature    text NOT NULL,
    event_index  integer NOT NULL,
    lease        text NOT NULL,
    node         text NOT NULL,
    provider     text NOT NULL,
    seq          numeric(20, 0) NOT NULL,
    period_start bigint NOT NULL,
    period_end   bigint NOT NULL,
    gpu_seconds  numeric(20, 0) NOT NULL,
    amount       numeric(20, 0) NOT NULL,
    payout       numeric(20, 0) NOT NULL,
    fee          numeric(20, 0) NOT NULL,
    escrow_left  numeric(20, 0) NOT NULL,
    slot         bigint NOT NULL,
    block_time   bigint,
    PRIMARY KEY (signature, event_index)
);
CREATE INDEX settlements_lease ON settlements (lease, slot);
CREATE INDEX settlements_provider ON settlements (provider, slot);
CREATE INDEX settlements_node ON settlements (node, slot);

CREATE TABLE slashes (
    signature     text NOT NULL,
    event_index   integer NOT NULL,
    provider      text NOT NULL,
    node          text NOT NULL,
    attester      text NOT NULL,
    fault         text NOT NULL,
    evidence_hash text NOT NULL,
    amount        numeric(20, 0) NOT NULL,
    to_treasury   numeric(20, 0) NOT NULL,
    to_client     numeric(20, 0) NOT NULL,
    lease         text,
    jail_ends_at  bigint NOT NULL,
    slot          bigint NOT NULL,
    block_time    bigint,
    PRIMARY KEY (signature, event_index)
);
CREATE INDEX slashes_provider ON slashes (provider, slot);
CREATE INDEX slashes_node ON slashes (node, slot);
