-- The secrets of a lease's job, sealed by its client to each node's key (gpunet.secrets): the
-- coordinator keeps and relays only these ciphertexts (name -> base64 sealed box), never a value.
CREATE TABLE job_secrets (
    lease      text NOT NULL,
    job_number integer NOT NULL,
    node_key   text NOT NULL,
    sealed     jsonb NOT NULL,
    given_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lease, job_number, node_key)
);
