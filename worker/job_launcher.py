"""The first program of a host job inside its sandbox (worker/sandbox.py runs this file's text with
the worker's own Python, `python -I -S -c`, after bubblewrap and, for a root worker, setpriv: as the
job's uid, without capabilities; standard library only).

The job's environment reaches it under the prefix GPUNET_JOBENV_, so that bubblewrap and setpriv,
which run as root, never act on a variable the job chose: LD_PRELOAD or GCONV_PATH would otherwise
load the client's code into a root process on the supplier's machine. The job's command gets them
without the prefix, and nothing else; and every signal's default action back (the runner ignores
SIGTERM in bubblewrap, Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored
across exec)."""

import os
import signal
import sys

PREFIX = "GPUNET_JOBENV_"

env = {name[len(PREFIX) :]: value for name, value in os.environ.items() if name.startswith(PREFIX)}
for number in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
    try:
        signal.signal(number, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
command = sys.argv[1:]
try:
    os.execvpe(command[0], command, env)
except OSError as e:
    print(f"gpunet: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
    sys.exit(127 if isinstance(e, FileNotFoundError) else 126)  # a shell's codes for the same
