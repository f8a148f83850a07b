"""Where a job runs on a supplier's machine: never as a plain process of the agent.

A job with an image (or, without one, the supplier's default image) runs in an OCI container through
podman or docker: no capabilities, no new privileges, a read-only root filesystem with only its work
and checkpoint directories writable, a process and a memory limit, only the lease's GPUs, and the
network the supplier's policy gives it (egress: a network of gpunet's whose traffic to the LAN, the
machine itself and the cloud metadata endpoint is rejected, worker/egress.py). Host jobs (a command
run on the machine itself) only where the supplier opted in, and then inside bubblewrap: read-only
system directories, only the job's own directories writable, the worker's state directory and keys
out of sight, a new pid namespace, no capabilities, and no network namespace of its own unless the
policy gives it none.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from worker.egress import EgressFilterUnavailable, install_egress_network
from worker.inputs import DEFAULT_LIMITS, InputLimits

if TYPE_CHECKING:
    from worker.runner import JobDirs

__all__ = ["ENGINE_ENV", "NetworkPolicy", "Sandbox", "SandboxUnavailable", "find_container_engine", "host_job_uid"]

NetworkPolicy = Literal["none", "egress", "cluster"]
EngineChoice = Literal["auto", "podman", "docker", "none"]
# The container engine's own configuration, passed to the engine (never into the job).
ENGINE_ENV = ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF", "DOCKER_HOST")
# System directories a host job sees read-only (those that are symlinks, as on merged-/usr systems,
# stay symlinks).
_SYSTEM_DIRS = ("/usr", "/etc", "/opt")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
# The uids host jobs of a root worker run as: one per lease, in a range no distribution hands out
# (above systemd's container ranges), with no name, no home and no file of the machine's own.
JOB_UID_BASE, JOB_UID_COUNT = 0x70000000, 1 << 24
SETPRIV = "/usr/bin/setpriv"  # util-linux: drops to the job's uid inside bubblewrap
# A host job's first program in its sandbox: it gives the job the environment that came prefixed
# (host_job_env), past bubblewrap and setpriv, which run as root (worker/job_launcher.py).
JOB_LAUNCHER = (Path(__file__).parent / "job_launcher.py").read_text()
JOB_ENV_PREFIX = "GPUNET_JOBENV_"
# Variables the C library, Go's runtime or the container engine act on: a container job's secret may
# not have such a name (its value passes through the engine's environment). Prefixes and names.
_ACTED_ON_PREFIXES = ("LD_", "GLIBC_", "MALLOC_", "GO", "CONTAINERS_", "DOCKER_", "BUILDAH_", "XDG_", "SSL_")
_ACTED_ON = {
    "PATH", "HOME", "TMPDIR", "TZDIR", "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "REGISTRY_AUTH_FILE", "STORAGE_DRIVER",
    "STORAGE_OPTS", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
}  # fmt: skip


def engine_acts_on(name: str) -> bool:
    return name in _ACTED_ON or name.upper().startswith(_ACTED_ON_PREFIXES)


def host_job_env(job_env: dict[str, str]) -> dict[str, str]:
    """What a host job's bubblewrap is started with: the agent's own PATH and locale (what bubblewrap
    and setpriv run with, as root), and the job's environment under JOB_ENV_PREFIX only, which no
    program but the launcher reads (a job's LD_PRELOAD never reaches a root process)."""
    base = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}
    return base | {JOB_ENV_PREFIX + name: value for name, value in job_env.items()}


# what bubblewrap keeps of root's capabilities for setpriv to drop to the job's uid (setpriv then
# drops them all, the bounding set too, before the job's command: it runs with none)
_SETUID_CAPS = ("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP")


def drop_to(uid: int) -> list[str]:
    """setpriv's options: the job's uid and gid, no other group, no capability, no new privileges."""
    return [
        f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
    ]  # fmt: skip


def host_job_uid(lease: str) -> int:
    """The uid (and gid) a root worker's host job of this lease runs as: its own, so that a lease's
    process limit (RLIMIT_NPROC, per uid) is its own too."""
    digest = hashlib.sha256(lease.encode()).digest()
    return JOB_UID_BASE + int.from_bytes(digest[:4], "big") % JOB_UID_COUNT


class SandboxUnavailable(RuntimeError):
    """The worker cannot run jobs sandboxed as configured: it must not start."""


@functools.cache
def _works(*argv: str) -> bool:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def _fails(*argv: str) -> str | None:
    """Why the command fails (its last word), or None when it works."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"


def container_problem(engine: tuple[str, ...], pids_limit: int, memory: str | None) -> str | None:
    """Why the engine cannot run a job's container, or None: it runs one (podman: the machine's own
    root as an overlay, `true`; a fraction of a second, nothing pulled) under the restrictions every
    job gets, so that an engine that answers `info` but whose runtime fails (every job exiting 126
    while its lease pays) stops the worker at its start instead. Docker has no image-less run: it
    is checked with `info` only."""
    if Path(engine[0]).name != "podman":
        return None
    return _fails(
        *engine, "run", "--rm", "--network=none", "--cap-drop=ALL", "--security-opt=no-new-privileges",
        "--read-only", "--read-only-tmpfs=false", f"--pids-limit={pids_limit}",
        *([f"--memory={memory}"] if memory else []), "--rootfs", "/:O", "true",
    )  # fmt: skip


def find_container_engine(choice: EngineChoice = "auto", runtime: str | None = None) -> tuple[str, ...] | None:
    """The argv prefix of a container engine that answers (`podman info`, `docker info`: an installed
    docker whose daemon is down does not count): podman first, then docker; None when none works."""
    names = {"auto": ("podman", "docker"), "none": ()}.get(choice, (choice,))
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        prefix = (path, "--runtime", runtime) if runtime and name == "podman" else (path,)
        if _works(*prefix, "info"):
            return prefix
    return None


def nvidia_device_nodes(
    gpu_uuids: Sequence[str], proc: Path = Path("/proc/driver/nvidia/gpus"), dev: Path = Path("/dev")
) -> list[str]:
    """The NVIDIA device nodes a host job with these GPUs needs: the driver's shared ones
    (nvidiactl, nvidia-uvm, ...) and /dev/nvidia<minor> of each of its GPUs, the minor read from
    the driver's /proc/driver/nvidia/gpus/*/information ("GPU UUID", "Device Minor"). Every GPU's
    node when that cannot be read for one of them (docs/supplier/guide.md says so)."""
    shared = [p for p in sorted(glob.glob(f"{dev}/nvidia*")) if not Path(p).name[len("nvidia") :].isdigit()]
    minors: dict[str, str] = {}
    for info in sorted(proc.glob("*/information")):
        try:
            fields = dict(line.split(":", 1) for line in info.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if "GPU UUID" in fields and "Device Minor" in fields:
            minors[fields["GPU UUID"].strip()] = fields["Device Minor"].strip()
    if all(uuid in minors for uuid in gpu_uuids):
        own = [f"{dev}/nvidia{minors[uuid]}" for uuid in gpu_uuids]
    else:
        own = [p for p in sorted(glob.glob(f"{dev}/nvidia*")) if Path(p).name[len("nvidia") :].isdigit()]
    return [*shared, *(p for p in own if os.path.exists(p))]


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


@dataclass(frozen=True)
class Sandbox:
    """How this node runs jobs. `engine`: the container engine's argv prefix, None without one.
    `bwrap`: bubblewrap's path, set only where the supplier allows host jobs. `host_paths`: what host
    jobs see read-only besides the system directories; `hidden`: what they never see, even there."""

    engine: tuple[str, ...] | None = None
    default_image: str | None = None
    network: NetworkPolicy = "egress"
    pids_limit: int = 4096
    memory: str | None = None
    bwrap: str | None = None
    host_paths: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    label: str | None = None  # this worker's containers carry the label gpunet.worker=<label>
    # The engine network of container jobs with a network of their own (not the host's): gpunet's
    # filtered one under the egress policy (worker/egress.py); the engine's bridge when unfiltered.
    egress_network: str = "bridge"
    egress_allow: tuple[str, ...] = ()  # what its filter lets through although private
    # a root worker's host jobs run as an unprivileged uid of their own (host_job_uid), not as root
    drop_root: bool = False
    file_bytes: int = 64 * 2**30  # the largest file a host job may write (RLIMIT_FSIZE)
    # what a job's inputs may take, and where they may come from (the egress policy's rules: worker/inputs.py)
    inputs: InputLimits = DEFAULT_LIMITS

    @classmethod
    def configure(
        cls,
        *,
        engine: EngineChoice = "auto",
        runtime: str | None = None,
        default_image: str | None = None,
        allow_host_jobs: bool = False,
        network: NetworkPolicy = "egress",
        pids_limit: int = 4096,
        memory: str | None = None,
        host_paths: Sequence[Path] = (),
        hidden: Sequence[Path] = (),
        label: str | None = None,
        egress_allow: Sequence[str] = (),
        egress_unfiltered: bool = False,
        file_bytes: int = 64 * 2**30,
        inputs_max_bytes: int = InputLimits.max_bytes,
        inputs_seconds: float = InputLimits.seconds,
    ) -> Sandbox:
        """The node's sandbox from the supplier's settings; SandboxUnavailable (saying what to do)
        when jobs could not run sandboxed at all, or, under the egress policy, their network could not
        be filtered (unless the supplier opted out: `egress_unfiltered`). `egress_allow`: the CIDRs
        egress jobs may reach even where they are private."""
        found = find_container_engine(engine, runtime)
        if found is not None and (problem := container_problem(found, pids_limit, memory)) is not None:
            raise SandboxUnavailable(
                f"the container engine ({' '.join(found)}) answers but cannot run a container ({problem}): "
                "fix the engine (podman in a container or VM: GPUNET_WORKER_CONTAINER_RUNTIME=runc; "
                "podman's ulimits: see docs/supplier/guide.md), or run host jobs only "
                "(GPUNET_WORKER_CONTAINER_ENGINE=none "
                "and --allow-host-jobs)"
            )
        if found is None and engine not in ("auto", "none"):
            raise SandboxUnavailable(
                f"the container engine {engine!r} is not installed or does not answer `{engine} info`: "
                "install it (podman: apt-get install podman runc) or start its daemon, or choose another engine"
            )
        if found is None and not allow_host_jobs:
            raise SandboxUnavailable(
                "no working container engine (podman or docker) to run jobs in: install podman "
                "(apt-get install podman runc) or start docker's daemon; or, to run jobs as host processes "
                "inside bubblewrap, opt in with --allow-host-jobs (GPUNET_WORKER_ALLOW_HOST_JOBS=1)"
            )
        if default_image is not None and found is None:
            raise SandboxUnavailable(
                f"--default-image {default_image!r} needs a working container engine (podman or docker): "
                "install one, or leave the default image unset"
            )
        bwrap = None
        drop_root = allow_host_jobs and os.geteuid() == 0
        if drop_root and not os.access(SETPRIV, os.X_OK):
            raise SandboxUnavailable(
                f"a root worker runs host jobs as an unprivileged user through {SETPRIV}, which is not "
                "installed: apt-get install util-linux"
            )
        if allow_host_jobs:
            bwrap = shutil.which("bwrap")
            drop = [SETPRIV, *drop_to(JOB_UID_BASE)] if drop_root else []
            # what every host job's sandbox uses (--perms: bubblewrap 0.5 or newer), run once
            problem = "is not installed: apt-get install bubblewrap" if bwrap is None else None
            if bwrap is not None and (failed := _fails(
                bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--perms", "1777",
                "--tmpfs", "/dev/shm", "--unshare-pid", *(["--cap-drop", "ALL", *_SETUID_CAPS] if drop_root else []),
                "--", *drop, "true",
            )):  # fmt: skip
                problem = f"fails here ({bwrap}: {failed}; host jobs need bubblewrap 0.5 or newer)"
            if problem is not None:
                raise SandboxUnavailable(f"--allow-host-jobs runs host jobs inside bubblewrap, which {problem}")
        egress_network = "bridge"
        if found is not None and network == "egress" and not egress_unfiltered:
            if Path(found[0]).name != "podman":
                raise SandboxUnavailable(
                    f"the egress policy filters container jobs' traffic on podman's networks only ({found[0]} "
                    "is not podman): use podman (GPUNET_WORKER_CONTAINER_ENGINE=podman), or give jobs no network "
                    "(--network none), or let jobs reach everything this machine reaches, your LAN and a cloud "
                    "machine's credentials included (--egress-unfiltered)"
                )
            try:
                egress_network = install_egress_network(found, egress_allow).name
            except EgressFilterUnavailable as e:
                why = f"cannot keep egress jobs off the LAN and the cloud metadata endpoint: {e}"
                raise SandboxUnavailable(why) from None
        python = [Path(sys.prefix), Path(sys.base_prefix)]
        return cls(
            engine=found,
            default_image=default_image,
            network=network,
            pids_limit=pids_limit,
            memory=memory,
            bwrap=bwrap,
            host_paths=tuple(dict.fromkeys(p.expanduser().resolve() for p in [*host_paths, *python])),
            hidden=tuple(p.expanduser().resolve() for p in hidden),
            label=label,
            egress_network=egress_network,
            egress_allow=tuple(egress_allow),
            drop_root=drop_root,
            file_bytes=file_bytes,
            inputs=InputLimits(max_bytes=inputs_max_bytes, seconds=inputs_seconds, allowed=tuple(egress_allow)),
        )

    def keep_egress_filter(self) -> None:
        """Installs the egress filter again (it is idempotent) before a container job on its network
        starts: the machine's nftables ruleset may have been flushed since the worker started (Debian's
        nftables service does so when it starts), or the network removed. EgressFilterUnavailable when
        it cannot be: the job must not start."""
        if self.engine is not None and self.egress_network != "bridge":
            install_egress_network(self.engine, self.egress_allow)

    def remove_leftovers(self) -> int:
        """Removes this worker's containers that outlived an agent that died: `run` dies with the
        agent, but the container is the engine's and runs on. Call it holding the state directory's
        lock (no other agent runs these). How many it removed."""
        if self.engine is None or self.label is None:
            return 0
        listed = subprocess.run(
            [*self.engine, "ps", "--all", "--quiet", "--filter", f"label=gpunet.worker={self.label}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        ids = listed.stdout.split()
        if ids:
            subprocess.run([*self.engine, "rm", "--force", *ids], capture_output=True, timeout=300, check=False)
        return len(ids)

    def refusal(self, image: str | None, secrets: Collection[str] = ()) -> str | None:
        """Why a job naming `image` (None: no image) and `secrets` cannot run here, or None."""
        image = image or self.default_image
        if image is not None and (acted_on := sorted(name for name in secrets if engine_acts_on(name))):
            # a container's secrets reach it through the engine's environment (never its argv), and the
            # engine runs as root: a secret named LD_PRELOAD or CONTAINERS_CONF would be root's
            return (
                f"the job's secret(s) {', '.join(acted_on)} would be read by the container engine itself, as "
                "root, before the container starts: give them other names (or as plain --env values)"
            )
        if image is None and self.bwrap is None:
            return (
                "this node runs jobs only in containers and the job names no image (nor did the supplier "
                "set a default image): give the job an image"
            )
        if image is not None and self.engine is None:
            return (
                f"the job needs a container (image {image!r}) but this node has no working container engine "
                "(podman or docker): it runs host jobs only"
            )
        return None

    def container_argv(
        self,
        image: str,
        command: list[str],
        dirs: JobDirs,
        *,
        name: str,
        env: dict[str, str],
        gpu_uuids: list[str],
        network: bool,
        host_network: bool = False,
        private_tmp: bool = False,
        secrets: Collection[str] = (),
    ) -> list[str]:
        """`podman run` (or `docker run`) of the job with every restriction in force. The `secrets`
        among `env` go by name only (`-e NAME`: the engine reads the value from its own environment),
        never as values in a command line any user of the machine can read.

        A network, when given, is `egress_network` (outbound only); a cluster job's (`host_network`)
        is the host's: its peers reach it at the node's advertised address on its cluster ports, and
        NCCL, gloo and Ray advertise the address they bind, which behind the bridge's NAT would be the
        container's private one. The job then also sees the host's interfaces and whatever listens on
        the host's loopback (the supplier firewalls all but the cluster ports from outside).
        `private_tmp`: a writable tmpfs of its own at /tmp (a Ray node's sockets and logs)."""
        assert self.engine is not None
        podman = Path(self.engine[0]).name == "podman"
        argv = [
            *self.engine,
            "run",
            "--rm",
            "--init",
            "--name",
            name,
            *(["--label", f"gpunet.worker={self.label}"] if self.label else []),
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            "--read-only",
            *(["--read-only-tmpfs=false"] if podman else []),  # podman would add writable /tmp, /run
            f"--pids-limit={self.pids_limit}",
            *([f"--memory={self.memory}"] if self.memory else []),
            f"--network={('host' if host_network else self.egress_network) if network else 'none'}",
            *(["--tmpfs", "/tmp:rw,nosuid,nodev"] if private_tmp else []),
            "-v",
            f"{dirs.workdir}:/work:rw",
            "-v",
            f"{dirs.checkpoint}:/checkpoint:rw",
            "-w",
            "/work",
        ]
        if gpu_uuids:
            if podman:  # CDI device names (nvidia-ctk cdi generate)
                argv += [arg for uuid in gpu_uuids for arg in ("--device", f"nvidia.com/gpu={uuid}")]
            else:
                argv += ["--gpus", f'"device={",".join(gpu_uuids)}"']
        for key, value in env.items():
            argv += ["-e", key if key in secrets else f"{key}={value}"]
        return [*argv, image, *command]

    def host_argv(
        self,
        command: list[str],
        dirs: JobDirs,
        *,
        network: bool,
        gpu_uuids: list[str],
        private_tmp: bool = False,
        uid: int | None = None,
    ) -> list[str]:
        """bubblewrap around a host job: it sees the system directories and `host_paths` read-only,
        its own two directories writable, nothing of `hidden`; a pid namespace of its own; no
        capabilities; the host's network unless `network` is False; with real GPUs, the device nodes
        of those in `gpu_uuids` only (see nvidia_device_nodes), and a read-only /sys for the driver's
        libraries. `uid`: what the job runs as (a root worker's: see host_job_uid; bubblewrap runs as
        root to set the sandbox up, setpriv drops to it before the job's command); the runner gives it
        the job's directories. The job runs with SIGTERM's default action (the runner ignores SIGTERM
        in bubblewrap itself, which would otherwise die and take the job with it before its grace
        period)."""
        assert self.bwrap is not None
        argv = [
            self.bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            *([] if network else ["--unshare-net"]),
            "--cap-drop",
            "ALL",
            *(_SETUID_CAPS if uid is not None else []),
        ]
        if private_tmp:
            # a writable /tmp of its own (a Ray node's sockets, whose paths must be short), first: what
            # is bound below stays visible even under /tmp (a worker's venv there, the job's dirs)
            argv += ["--perms", "1777", "--tmpfs", "/tmp"]
        made: set[Path] = set()
        bound: list[Path] = []

        def parents(path: Path) -> list[str]:
            # bubblewrap makes a bind's missing parents readable by root only: an unprivileged job
            # could not reach what is bound there (a Python under /root/.pyenv, its own dirs under a
            # hidden state dir): made first, readable (one that exists already is left as it is)
            out: list[str] = []
            for parent in reversed(path.parents):
                if parent != Path("/") and parent not in made:
                    made.add(parent)
                    out += ["--perms", "0755", "--dir", str(parent)]
            return out

        for top in _SYSTEM_DIRS:
            if os.path.isdir(top) and not os.path.islink(top):
                argv += ["--ro-bind", top, top]
                bound.append(Path(top))
        for link in _SYSTEM_LINKS:
            if os.path.islink(link):
                argv += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                argv += ["--ro-bind", link, link]
                bound.append(Path(link))
        for path in self.host_paths:
            if not _under(path, bound) and path.exists():
                argv += [*parents(path), "--ro-bind", str(path), str(path)]
                bound.append(path)
        # /dev/shm of its own, writable by the job (bubblewrap's is root's only: Ray's object store,
        # NCCL and torch's DataLoader need it)
        argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]
        if gpu_uuids:
            for device in nvidia_device_nodes(gpu_uuids):
                argv += ["--dev-bind", device, device]
            argv += ["--ro-bind-try", "/sys", "/sys"]
        for path in _PROC_READ_ONLY:  # as container runtimes do: no sysctl writes, even as uid 0
            argv += ["--ro-bind-try", path, path]
        # what is hidden but under (or over) something bound: covered by an empty read-only tmpfs
        hidden = [str(p) for p in self.hidden if _under(p, bound) or any(_under(b, [p]) for b in bound)]
        for path in hidden:
            argv += ["--tmpfs", path]
        for d in (dirs.workdir, dirs.checkpoint):
            argv += [*parents(d), "--bind", str(d), str(d)]
        for path in [*hidden, "/"]:  # bubblewrap's own root too: nothing writable but the job's dirs
            argv += ["--remount-ro", path]
        argv += ["--chdir", str(dirs.workdir), "--"]
        if uid is not None:
            argv += [SETPRIV, *drop_to(uid)]
        return [*argv, sys.executable, "-I", "-S", "-c", JOB_LAUNCHER, *command]
