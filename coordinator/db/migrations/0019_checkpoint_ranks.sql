-- A multi-node lease's small checkpoints (those sent through the gateway) are per rank, as the
-- checkpoint store's are: the sending node's rank is its place in the lease (the coordinator's
-- ledger says it, not the node), and a node that takes over rank r restores rank r's only.
ALTER TABLE checkpoints ADD COLUMN rank integer NOT NULL DEFAULT 0;
ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;
ALTER TABLE checkpoints ADD PRIMARY KEY (lease, rank);
