-- Leases gain the closing state (closed for use, their last usage still being settled, then
-- finalized) and count the tokens found in their vault beyond the escrow: sent there from
-- outside, refunded to the client at finalization.
ALTER TABLE leases DROP CONSTRAINT leases_status_check;
ALTER TABLE leases ADD CONSTRAINT leases_status_check CHECK (status IN ('open', 'active', 'closing', 'closed'));
ALTER TABLE leases ADD COLUMN donations numeric(20, 0) NOT NULL DEFAULT 0;
