-- Calibrated deadlines (coordinator/calibration.py, `gpunet coordinator calibrate MODEL`): a real
-- GPU's deadlines rest on its model's public peak figures times an assumed efficiency until an
-- operator calibrates the model from the fleet's own measurements. Until then a real GPU that is
-- right but late is `too_slow`: neither slashed nor verified, and challenged again.
--
-- Each check's evidence keeps what its measurement needs: the compute check's size in FLOPs (the
-- memory check's is its blocks per lane, already kept) and the calibration its deadline rested on.

ALTER TABLE verifications DROP CONSTRAINT verifications_verdict_check;
ALTER TABLE verifications ADD CONSTRAINT verifications_verdict_check
    -- too_slow: an uncalibrated real GPU's right answer after the deadline (not held against it)
    CHECK (verdict IN ('passed', 'failed', 'refused', 'unfit', 'unverified', 'too_slow'));
ALTER TABLE verifications
    ADD COLUMN flops        bigint,  -- the compute check's work (2 * products * n * n * depth)
    ADD COLUMN calibration  bigint;  -- model_calibrations.id its deadline rested on (NULL: the catalog's assumption)

UPDATE verifications SET flops = 2::bigint * products * n * n * depth WHERE kind = 'compute';

-- A model's calibrations, the latest in force: the compute check's efficiency (the share of the
-- model's dense TF32 peak, instead of gpunet.verification.real_efficiency) and the memory
-- check's step time (seconds per block of a lane, instead of gpunet.vram.REAL_STEP_SECONDS), with
-- who set them, when, and the measurements (verifications rows) they came from.
CREATE TABLE model_calibrations (
    id               bigserial PRIMARY KEY,
    model            text NOT NULL,                 -- the catalog's name (gpunet.catalog)
    efficiency       double precision NOT NULL CHECK (efficiency > 0),
    step_seconds     double precision NOT NULL CHECK (step_seconds > 0),
    percentile       integer NOT NULL,              -- of the measured efficiencies (the step times': 100 minus it)
    compute_samples  integer NOT NULL,
    memory_samples   integer NOT NULL,
    nodes            integer NOT NULL,
    suppliers        integer NOT NULL,
    sample           bigint[] NOT NULL,             -- the verifications rows measured
    set_by           text NOT NULL,
    at               timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX model_calibrations_model ON model_calibrations (model, id);
