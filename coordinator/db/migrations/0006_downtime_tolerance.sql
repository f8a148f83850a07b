-- A lease's downtime tolerance (open_lease's argument, in LeaseOpened): how long its nodes may be
-- silent before the coordinator treats them as lost; 0 is the network's default (lost_after).
-- Leases indexed before this migration were opened without one.
ALTER TABLE leases ADD COLUMN downtime_tolerance_seconds integer NOT NULL DEFAULT 0;
