"""A Ray driver for the Ray cluster tests (the job's command: it runs on the lease's head): STEPS
steps, each a task on every node of the cluster (2 GPUs each, one per node), the step checkpointed
in $GPUNET_CHECKPOINT_DIR; started again (on a new head after a failover) it resumes from there.
Prints "fresh start" or "resumed from N", "step N on K nodes", then "done: N steps"."""

import os
import time
from pathlib import Path

import ray

checkpoint = Path(os.environ["GPUNET_CHECKPOINT_DIR"]) / "step"
steps, nodes = int(os.environ.get("STEPS", "10")), int(os.environ.get("NODES", "3"))
step = int(checkpoint.read_text()) if checkpoint.exists() else 0
print(f"resumed from {step}" if step else "fresh start", flush=True)
ray.init()


@ray.remote(num_gpus=2, max_retries=-1)
def work(i: int) -> str:
    time.sleep(0.5)
    return ray.util.get_node_ip_address()


while step < steps:
    where = ray.get([work.remote(step) for _ in range(nodes)])
    step += 1
    tmp = checkpoint.with_suffix(".tmp")
    tmp.write_text(str(step))
    tmp.replace(checkpoint)  # atomic: a kill never leaves half a checkpoint
    print(f"step {step} on {len(set(where))} nodes", flush=True)
print(f"done: {steps} steps", flush=True)
