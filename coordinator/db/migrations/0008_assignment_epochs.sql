-- A share's assignment epoch: the transaction that gave the node its share (assign_lease or
-- reassign_lease). It travels with the dispatch and with every job status, log line and checkpoint
-- the node sends about the share; a message of an earlier epoch (the node's share moved away, and
-- perhaps back) is refused. NULL for rows indexed before this column existed: not checked.
ALTER TABLE assignments ADD COLUMN assigned_by text;
