-- Coordinator replicas elect one leader through this one row (coordinator.leader): a replica takes
-- it when it has expired, the leader renews it, and `term` (+1 on every change of holder) is the
-- fencing token every decision is checked against. Each replica's row also tells the others where
-- the leader's worker gateway and API are.
CREATE TABLE leader (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    holder      text NOT NULL DEFAULT '',
    term        bigint NOT NULL DEFAULT 0,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    gateway_url text NOT NULL DEFAULT '',
    api_url     text NOT NULL DEFAULT '',
    since       timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO leader DEFAULT VALUES;

-- Every decision a leader sends to the chain is recorded here first, in a transaction that checks
-- its term is still current (coordinator.leader.Fence): a paused leader that wakes is refused here,
-- before the chain. What it decided (assign, reassign, slash, verification, settle, close, finalize)
-- and about what, under which term.
CREATE TABLE decisions (
    id       bigserial PRIMARY KEY,
    term     bigint NOT NULL,
    holder   text NOT NULL,
    kind     text NOT NULL,
    subject  text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX decisions_term ON decisions (term);
