-- GPU verification's memory check (gpunet.vram): each GPU's challenge is now a compute check and a
-- memory check, one row of evidence each. `kind` says which (NULL: a verdict about the node, not
-- one GPU); the memory check's sizes and its second deadline get their own columns, its seed,
-- expected time, fill deadline and commitment time reuse the compute check's.

ALTER TABLE verifications
    ADD COLUMN kind                     text CHECK (kind IN ('compute', 'memory')),
    ADD COLUMN lanes                    integer,
    ADD COLUMN blocks                   integer,           -- per lane
    ADD COLUMN block_bytes              integer,
    ADD COLUMN answer_deadline_seconds  double precision,  -- from naming the blocks to the answer
    ADD COLUMN answered_seconds         double precision;  -- how long the answer took (NULL: none)

UPDATE verifications SET kind = 'compute' WHERE challenge IS NOT NULL;
