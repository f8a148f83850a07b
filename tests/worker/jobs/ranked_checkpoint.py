"""A job with per-rank state (as a sharded optimizer's or a pipeline stage's): its checkpoint's
`owner` file names the rank that wrote it and a token of that rank's own. The ranks in STEP_RANKS
(default "0") also rewrite a `step` file every STEP_SECONDS, so they keep checkpointing. Started
again with a checkpoint (here, or on another node after a failover), it says whose it found and
writes a `resumed` file (so its node checkpoints too)."""

import os
import secrets
import time
from pathlib import Path

directory = Path(os.environ["GPUNET_CHECKPOINT_DIR"])
rank = os.environ.get("RANK", "0")
owner = directory / "owner"
if owner.exists():
    print(f"resumed {owner.read_text()} as rank {rank}", flush=True)
    (directory / "resumed").write_text(f"as rank {rank}")
else:
    owner.write_text(f"rank {rank} token {secrets.token_hex(8)}")  # one small write: its node sends it whole
    print(f"fresh {owner.read_text()}", flush=True)
step = 0
while True:
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.5")))
    step += 1
    if rank in os.environ.get("STEP_RANKS", "0").split(","):
        (directory / "step").write_text(str(step))
