-- A lease's served endpoints (coordinator/endpoints.py): the bearer tokens its client issued (only
-- each token's SHA-256 is kept; a revoked one stays, so that it is told apart from one never issued),
-- which exposed names the client made public, and the access log the client reads (bounded per lease).
CREATE TABLE endpoint_tokens (
    id         text PRIMARY KEY,
    lease      text NOT NULL,
    sha256     bytea NOT NULL UNIQUE,
    label      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    revoked_at timestamptz
);
CREATE INDEX endpoint_tokens_lease ON endpoint_tokens (lease);

CREATE TABLE endpoint_access (
    lease      text NOT NULL,
    name       text NOT NULL,
    public     boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lease, name)
);

CREATE TABLE endpoint_requests (
    id        bigserial PRIMARY KEY,
    lease     text NOT NULL,
    at        timestamptz NOT NULL,
    name      text NOT NULL,
    method    text NOT NULL,
    path      text NOT NULL,  -- without the query (it may hold the caller's secrets)
    status    integer NOT NULL,
    bytes_in  bigint NOT NULL,  -- the request's body
    bytes_out bigint NOT NULL,  -- the response's body
    ms        integer NOT NULL,
    node_key  text,  -- the node that answered (null: none did)
    token     text  -- the id of the token it came with (null: none, a public endpoint)
);
CREATE INDEX endpoint_requests_lease ON endpoint_requests (lease, id);
