-- Cumulative usage receipts replace per-period usage reports (the program settles a share's
-- receipt's increment over what is settled, and a settlement writes no shared account).
--
-- A share's assignment on chain now has an epoch (its number among the lease's assignments, which
-- its receipts name), the moment it was assigned, and the cumulative GPU-seconds of the last
-- settled receipt besides those paid for; the sequence numbers are gone.
ALTER TABLE assignments DROP COLUMN last_seq;
ALTER TABLE assignments ADD COLUMN epoch numeric(20, 0) NOT NULL DEFAULT 0;
ALTER TABLE assignments ADD COLUMN assigned_at bigint NOT NULL DEFAULT 0;
ALTER TABLE assignments ADD COLUMN receipt_gpu_seconds numeric(20, 0) NOT NULL DEFAULT 0;

-- A settlement pays a receipt's increment: the receipt's epoch, cumulative and `through` replace
-- the report's seq and period; `gpu_seconds` is what this settlement paid for.
ALTER TABLE settlements DROP COLUMN seq;
ALTER TABLE settlements DROP COLUMN period_start;
ALTER TABLE settlements DROP COLUMN period_end;
ALTER TABLE settlements ADD COLUMN epoch numeric(20, 0) NOT NULL DEFAULT 0;
ALTER TABLE settlements ADD COLUMN receipt_gpu_seconds numeric(20, 0) NOT NULL DEFAULT 0;
ALTER TABLE settlements ADD COLUMN through bigint NOT NULL DEFAULT 0;

-- Fees stay in the lease's vault until swept to the treasury (sweep_fees, or finalize_lease).
ALTER TABLE leases ADD COLUMN fees_swept numeric(20, 0) NOT NULL DEFAULT 0;

-- The newest receipt of each share as its node signed it (one row per share, however long the
-- lease): replaced by every newer one, and by the node's final one (its billing ended, maybe
-- before receipts it sent earlier). 'pending' until settled on chain (the chain decides what is
-- settled: a receipt not above the share's settled one is acknowledged, never sent).
DROP TABLE usage_reports;
CREATE TABLE usage_receipts (
    lease        text NOT NULL,
    node_key     text NOT NULL,
    epoch        numeric(20, 0) NOT NULL,
    gpu_seconds  numeric(20, 0) NOT NULL,
    through      bigint NOT NULL,
    final        boolean NOT NULL,
    signature    text NOT NULL,  -- the node's Ed25519 signature over the canonical message (base58)
    simulated    boolean NOT NULL,
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'settled', 'already_settled', 'refused')),
    reason       text NOT NULL DEFAULT '',
    settled_by   text,           -- the settle_usage transaction of its last settlement
    received_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lease, node_key, epoch)
);
CREATE INDEX usage_receipts_pending ON usage_receipts (received_at) WHERE status = 'pending';
