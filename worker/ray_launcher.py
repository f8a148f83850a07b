"""The process a Ray job runs as on each node of its lease, inside the job's sandbox (the runner
gives this file's text to `python -c`, so it needs only the standard library and Ray's CLI).

argv[1] is JSON: `ray` (the CLI), `start` (`ray start`'s options for this node), `head` (the head's
GCS "HOST:PORT"), `is_head`, `dashboard` (the head's URL), `nodes` (the lease's node count) and
`command` (the job's own, run on the head). Every node runs `ray start --block`; a node that joins
waits for the head to answer first. The head says in the job's log when all the lease's nodes are in
("cluster ready"), when one is lost and when the cluster is whole again, and runs the job's command
(if any) as the cluster's driver once it is ready, with RAY_ADDRESS set. The cluster admits only
holders of the job's secret RAY_AUTH_TOKEN (RAY_AUTH_MODE=token, set by the runner). SIGTERM stops this node
only: its own processes (never `ray stop`, which stops every Ray node of the machine's user)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

config = json.loads(sys.argv[1])
children: list[subprocess.Popen] = []
stopping = False


def say(text: str) -> None:
    print(f"[gpunet: ray] {text}", flush=True)


def stop(signum: int, frame: object) -> None:
    global stopping
    stopping = True
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)


def alive() -> tuple[int, float] | None:
    """The head's count of alive nodes and their GPUs (None: the dashboard does not answer yet)."""
    url = config["dashboard"] + "/api/v0/nodes?limit=10000&detail=false"
    token = {"Authorization": f"Bearer {os.environ.get('RAY_AUTH_TOKEN', '')}"}  # the job's secret
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=token), timeout=5) as answer:
            nodes = json.load(answer)["data"]["result"]["result"]
    except (OSError, ValueError, KeyError):
        return None
    up = [n for n in nodes if n.get("state") == "ALIVE"]
    return len(up), sum(n.get("resources_total", {}).get("GPU", 0) for n in up)


signal.signal(signal.SIGTERM, stop)
if not config["is_head"]:
    host, _, port = config["head"].rpartition(":")
    say(f"joining the head at {config['head']}")
    while not stopping:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
            break
        except OSError:
            time.sleep(0.5)
# Ray's own chatter goes to ray-node.log in the job's working directory (its tail comes to the job's
# log if the node fails): the job's log keeps what happened to the cluster and the driver's output.
chatter = open("ray-node.log", "ab")
node = subprocess.Popen(
    [config["ray"], "start", "--block", *config["start"]], stdin=subprocess.DEVNULL, stdout=chatter, stderr=chatter
)
children.append(node)
say(f"{'head' if config['is_head'] else 'Ray node'} starting (its log: $GPUNET_WORKDIR/ray-node.log)")
if stopping:
    stop(signal.SIGTERM, None)

driver: subprocess.Popen | None = None
ready = whole = False
while node.poll() is None:
    time.sleep(1.0)
    if not config["is_head"] or stopping:
        continue
    if driver is not None and driver.returncode is None and driver.poll() is not None:
        say(f"the driver exited with {driver.returncode}")
    seen = alive()
    if seen is None:
        continue
    count, gpus = seen
    if count >= config["nodes"] and not whole:
        say(
            f"cluster {'whole again' if ready else 'ready'}: {count} nodes, {gpus:g} GPUs; "
            f"Jobs API and dashboard at {config['dashboard']}, RAY_ADDRESS={config['head']}"
        )
        ready = whole = True
        if config["command"] and driver is None:
            say(f"running the driver: {' '.join(config['command'])}")
            driver = subprocess.Popen(
                config["command"], stdin=subprocess.DEVNULL, env={**os.environ, "RAY_ADDRESS": config["head"]}
            )
            children.append(driver)
    elif ready and whole and count < config["nodes"]:
        say(f"node lost: {count} of {config['nodes']} nodes alive")
        whole = False

code = node.wait()
if driver is not None and driver.poll() is None:
    driver.send_signal(signal.SIGTERM)
    driver.wait()
if not stopping:
    chatter.close()
    with open("ray-node.log", "rb") as written:
        for line in written.read().decode(errors="replace").splitlines()[-20:]:
            print(line, flush=True)
    say(f"this Ray node stopped (ray start exited with {code})")
sys.exit(0 if stopping else code or 1)
