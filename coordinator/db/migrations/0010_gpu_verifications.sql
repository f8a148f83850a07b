-- GPU verification (gpunet.verification): every challenge the coordinator ran, with what it asked,
-- how long the node took and the verdict, so anyone can read the evidence behind a node's status;
-- and each GPU identity with the node it was last seen on (one physical GPU counts once).

CREATE TABLE verifications (
    id                 bigserial PRIMARY KEY,
    node_key           text NOT NULL,
    gpu_index          integer,              -- NULL: a verdict about the node (its inventory), not one GPU
    gpu_uuid           text,
    model              text NOT NULL,        -- the registered model the challenge was sized for
    simulated          boolean NOT NULL,
    challenge          text,                 -- the challenge id
    seed               text,
    n                  integer,
    depth              integer,
    products           integer,
    expected_seconds   double precision,
    deadline_seconds   double precision,
    committed_seconds  double precision,     -- from sending the challenge to the commitment (NULL: none)
        -- passed; failed (slashed); unfit (no leases until fixed); refused or unverified (not held against it)
    verdict            text NOT NULL CHECK (verdict IN ('passed', 'failed', 'refused', 'unfit', 'unverified')),
    reason             text NOT NULL DEFAULT '',
    at                 timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX verifications_node ON verifications (node_key, id);

-- A node's claim on an identity lasts until its next verification drops it, or it goes stale.
CREATE TABLE gpu_identities (
    identity  text NOT NULL,  -- 'uuid:GPU-...' or 'serial:...'
    node_key  text NOT NULL,
    seen_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (identity, node_key)
);
