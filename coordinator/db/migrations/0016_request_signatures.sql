-- Signed API requests already answered (coordinator/api/work.py's authorize), shared by every
-- replica: a signature is good once, on any of them, within the clock-skew window; older ones are
-- refused as stale and pruned.
CREATE TABLE request_signatures (
    signature text PRIMARY KEY,
    signed_at timestamptz NOT NULL
);
CREATE INDEX request_signatures_signed_at ON request_signatures (signed_at);
