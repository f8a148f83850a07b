-- A node's announced maintenance (set_node_draining, event NodeDrainingSet): a draining node gets
-- no new leases and its shares move to other nodes without a slash. Nodes indexed before this
-- migration were never drained (the flag did not exist on chain).
ALTER TABLE nodes ADD COLUMN draining boolean NOT NULL DEFAULT false;
