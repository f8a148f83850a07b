-- How each node's cluster peers (and a Ray lease's client) reach it, as its worker advertised in its
-- last session's hello: written by the replica that admitted the session, read by every replica's
-- API (a follower holds no sessions).
CREATE TABLE node_reach (
    node_key    text PRIMARY KEY,
    host        text NOT NULL,      -- a URL host: an IPv6 address is in brackets
    ports_first integer,            -- the cluster ports it opens; NULL: an older worker that says none
    ports_last  integer,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
