"""A job with a checkpoint of real size: on a fresh start it writes MIB MiB of random data to
$GPUNET_CHECKPOINT_DIR/blob.bin and its SHA-256 to blob.sha256; started again (here, or on another
node after a failover) it checks every byte of blob.bin against blob.sha256 and says so. Then it
counts steps until stopped."""

import hashlib
import os
import time
from pathlib import Path

directory = Path(os.environ["GPUNET_CHECKPOINT_DIR"])
blob, digest = directory / "blob.bin", directory / "blob.sha256"
if digest.exists():
    h = hashlib.sha256()
    with blob.open("rb") as f:
        while part := f.read(8 << 20):
            h.update(part)
    ok = h.hexdigest() == digest.read_text().strip()
    print(f"resumed {'verified' if ok else 'CORRUPT'} {h.hexdigest()} {blob.stat().st_size}", flush=True)
else:
    h = hashlib.sha256()
    tmp = directory / ".blob.tmp"
    with tmp.open("wb") as f:
        for _ in range(int(os.environ.get("MIB", "1"))):
            part = os.urandom(1 << 20)
            h.update(part)
            f.write(part)
    tmp.replace(blob)
    (directory / ".sha.tmp").write_text(h.hexdigest())
    (directory / ".sha.tmp").replace(digest)
    print(f"fresh {h.hexdigest()}", flush=True)
step = 0
while True:
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.5")))
    step += 1
