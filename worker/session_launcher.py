"""The first process of a client's session inside a host job's sandbox (worker/job_access.py gives
this file's text to the worker's own Python, `python -I -S -c`, after nsenter and setpriv: it runs
in the job's namespaces, as the job's uid, without capabilities; it needs only the standard library).

argv[1] is JSON: `argv` (the command), `cwd` (the job's working directory) and `tty` (whether its
stdin is the session's terminal). The job's environment arrives in variables named with the prefix
GPUNET_JOBENV_, so that nsenter and setpriv, which run as root, see no variable the C library acts on
(LD_PRELOAD, LD_LIBRARY_PATH, GCONV_PATH, ...: the job chooses its environment); the command gets
them without the prefix, and nothing else. It leads a session of its own (with a tty, the terminal's:
Ctrl-C reaches its foreground job, not the agent's side), every signal's action is the default, and it
dies with the process that entered the sandbox (the agent's kill reaches it)."""

import ctypes
import fcntl
import json
import os
import signal
import sys
import termios

PREFIX = "GPUNET_JOBENV_"
PR_SET_PDEATHSIG = 1

config = json.loads(sys.argv[1])
env = {name[len(PREFIX) :]: value for name, value in os.environ.items() if name.startswith(PREFIX)}
# Python ignores SIGPIPE and SIGXFSZ itself, and an ignored signal stays ignored across exec
for number in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
    try:
        signal.signal(number, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
os.setsid()
if config["tty"]:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
program = config["argv"][0]
try:
    os.chdir(config["cwd"])
    os.execvpe(program, config["argv"], env)
except OSError as e:
    print(f"gpunet: cannot run {program!r} in the job: {e.strerror}", file=sys.stderr, flush=True)
    sys.exit(127 if isinstance(e, FileNotFoundError) else 126)  # a shell's codes for the same
