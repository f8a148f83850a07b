"""The coordinator's loops, one module each: placement, dispatch, failover (with its judge of
outages, `coordinator.outages`), drain, lease end, settlement, and the worker messages the gateway
hands over. Each is given only what it uses (the ledger's pool, the chain writer, the worker link,
the shared state of `coordinator.state`), never the coordinator; `coordinator.service` wires them."""
