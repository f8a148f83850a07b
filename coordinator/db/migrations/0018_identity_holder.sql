-- When two nodes claim one GPU identity, the one verified with it keeps it (the latest such pass):
-- a claim copied from the public evidence cannot unseat a verified node. Only when neither was
-- verified with it are both unfit.
ALTER TABLE gpu_identities ADD COLUMN verified_at timestamptz;
