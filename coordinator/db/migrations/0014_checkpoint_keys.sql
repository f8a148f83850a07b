-- A lease's checkpoint key, sealed by its client to each node's key (gpunet.checkpoint.seal_key):
-- the coordinator keeps and relays only these ciphertexts; the key itself never reaches it.
CREATE TABLE checkpoint_keys (
    lease    text NOT NULL,
    node_key text NOT NULL,
    sealed   text NOT NULL,
    given_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lease, node_key)
);
