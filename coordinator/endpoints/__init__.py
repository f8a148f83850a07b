"""Served endpoints: the coordinator's relay serves each HTTP port a lease's job exposes
(`JobSpec.expose`, protocol `http`) at one URL per lease and name,
`{GPUNET_ENDPOINT_URL or the API's URL}/endpoints/{lease}/{name}/{path}`, any method. The URL is
the same whichever node serves it: the relay forwards each request to one of the lease's nodes that
serve the name (its active shares in the ledger), so when a share moves after a node loss the same
URL serves from the new node.

**The path of a request** (coordinator.endpoints.serve). The checks go in this order, and a refused
request changes nothing:

1. a bad lease address: 400; a lease not indexed: 404; a closing or closed lease: **410** (an
   endpoint serves only while its lease is active; what the chain says about a lease is public);
   the ledger not answering: 503 with Retry-After.
2. access: a name the client made public (`POST /leases/{lease}/endpoints/{name}`, signed) takes
   anyone; any other needs `Authorization: Bearer <token>`, a token the lease's client created
   (`POST /leases/{lease}/endpoint-tokens`, signed; shown once, only its SHA-256 is kept). **401**:
   no credential, or a token this coordinator never issued (authenticate); **403**: a token this
   coordinator issued that does not open this endpoint (revoked, or another lease's); 400: an
   Authorization header that is no bearer token of gpunet's shape. Access comes before what the job
   exposes, so a stranger learns nothing of the job (its spec is private).
3. a name the current job does not expose: **404**; a `tcp` one is not served over HTTP (404 that
   says to reach it with `gpunet lease forward`).
4. limits per lease: requests per second (a token bucket: GPUNET_ENDPOINT_REQUESTS_PER_SECOND,
   GPUNET_ENDPOINT_BURST) and requests in flight (GPUNET_ENDPOINT_MAX_STREAMS): **429** with
   Retry-After beyond them. They are counted after access, so a stranger's refused requests never
   spend a lease's budget; they are kept per replica (N replicas take N times the rate).
5. a body larger than GPUNET_ENDPOINT_MAX_BODY_BYTES: **413** (the body is held whole, to be sent
   again to another node when the first fails).
6. the node: round robin over the lease's nodes whose worker has a data-plane link to this replica
   and whose last check passed (or was not made yet). The request goes through
   `Relay.open_endpoint` (a TLS channel pinned to the node key, whose plaintext is a TCP connection
   to the job's port) as HTTP/1.1 (h11), one request at a time on a channel; the response streams
   back as it comes (credit windows bound what the relay holds). A channel whose answer ended
   cleanly is kept up to 4 s for the next request to that node (keep-alive: a new channel costs a
   stream and a TLS handshake; a 1 KiB completion through workers and the relay on loopback took
   13.6 ms at the median with one each, 4.5 ms with kept ones, against 1.5 ms straight to the job);
   one the job closed meanwhile is dropped for a new one, the node not blamed. A node that fails
   before its answer's first byte is marked unhealthy and the request goes to the next (so a POST a
   node took and died on before answering may run twice; an answer cut off after it started is cut
   off for the caller too, never retried). While no node serves the name: **503** with Retry-After.

**Health.** Each endpoint requested in the last 10 minutes is checked every
GPUNET_ENDPOINT_HEALTH_SECONDS on each of its nodes by opening a stream to the job's port through
the relay and closing it: what a node loss or a job that stopped listening breaks, with nothing
sent to the job (no request in its logs, no health path it must have, no inference run). A failed
request marks its node unhealthy at once too; a passed check or request marks it healthy. When every
linked node is marked unhealthy they are still tried, in case a check is stale, before the 503.

**What is forwarded.** The method, the path and query after `/endpoints/{lease}/{name}` as sent
(percent-encoding kept), the headers less hop-by-hop ones; the caller's bearer token never reaches
the job (a token-protected endpoint's Authorization header is dropped; a public endpoint's reaches
the job, so the job may check credentials of its own, unless it holds a gpunet token);
X-Forwarded-For, -Proto, -Host and -Prefix (`/endpoints/{lease}/{name}`) are set. Back, the job's redirects to its own
paths (`Location: /...`) and its cookies' paths are put under that prefix, and its cookies' domains
dropped: every lease's endpoints share one origin, and one job's cookies must never reach another's.
Not relayed: WebSocket upgrades, HTTP/2 and trailers (`gpunet lease forward` reaches the port as
TCP). Pages are served under `Content-Security-Policy: sandbox ...` (GPUNET_ENDPOINT_SANDBOX) so a
job's page runs in an origin of its own, not the coordinator's (the explorer and the wallet app are
served from it).

**What the relay sees.** It terminates the caller's HTTP to check the token and pick a node, so it
sees a served endpoint's requests and answers in plaintext; the hop from the relay to the node is the
TLS channel pinned to the node's key. Reaching the job end to end encrypted is `gpunet lease forward`.

**Metrics** in /metrics: gpunet_endpoint_requests_total{code}, gpunet_endpoint_bytes_total{direction},
gpunet_endpoint_latency_seconds (to the response's head), gpunet_endpoint_retries_total,
gpunet_endpoint_streams. None is labelled by lease or name: their number is unbounded, and each value
of a label is a series Prometheus keeps for good; the access log has them.

**The access log** (`GET /leases/{lease}/endpoints/log`, signed by the lease's client): time, name,
method, path (without the query, which may hold the caller's secrets), status, body bytes in and out,
milliseconds, the node that answered and the token id used; every request to an endpoint of an
indexed lease, refused ones included, in the ledger, the newest GPUNET_ENDPOINT_LOG_PER_LEASE of each
lease. Entries are written within a second of their answer. Beside the HTTP statuses it holds 502
(the job's answer broke off after it started) and 499 (the caller went away first).

**Billing.** Exposed traffic is not billed separately: the lease's GPUs are already leased, and its
escrow pays for the time it holds them, whatever they serve.
"""

from coordinator.endpoints.routes import endpoint_routes
from coordinator.endpoints.serve import Channel, EndpointRelay, Endpoints, new_token

__all__ = ["Channel", "EndpointRelay", "Endpoints", "endpoint_routes", "new_token"]
