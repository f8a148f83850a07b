-- What a node said about shares it never held, stored before the gateway checked: usage receipts
-- of a lease and epoch no assignment of the node has (they filled settlement's window and were
-- never paid), and job statuses and log lines of a lease the node was never placed on (they wrote
-- into the client's view). Nothing reads them any more; they go. Every row recorded since has its
-- assignment, which the ledger never deletes.
DELETE FROM usage_receipts r
WHERE NOT EXISTS (SELECT 1 FROM assignments a
                  WHERE a.lease = r.lease AND a.node_key = r.node_key AND a.epoch = r.epoch);
DELETE FROM job_events e
WHERE NOT EXISTS (SELECT 1 FROM assignments a WHERE a.lease = e.lease AND a.node_key = e.node_key);
