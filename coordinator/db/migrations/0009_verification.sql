-- Verified supply (record_verification, event NodeVerified): the tier at which an attester last
-- verified the node's hardware (0 never, or cleared by a FailedVerification slash or a changed
-- inventory; 1 simulated reference; 2 compute and memory on a real GPU; 3 confidential computing),
-- until when it holds (unix seconds, 0 none) and the hash of the challenge evidence (hex; zeros
-- none). Nodes indexed before this migration were never verified (the fields did not exist on chain).
ALTER TABLE nodes
    ADD COLUMN verification_tier integer NOT NULL DEFAULT 0,
    ADD COLUMN verified_until bigint NOT NULL DEFAULT 0,
    ADD COLUMN verification_evidence text NOT NULL DEFAULT repeat('0', 64);
