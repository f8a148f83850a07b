# Shared variables for scripts/*: repository root, cargo target dir, Python venv (source it).
GPUNET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# One cargo target directory outside the checkout, shared by CI runs and clones on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpunet/target}"
VENV="${GPUNET_VENV:-$GPUNET_ROOT/.venv}"
PYTHON="$VENV/bin/python"
export GPUNET_ROOT VENV PYTHON

# quietly CMD...: runs CMD with its output kept back, shown (on stderr) only when it fails, with
# its exit status: an install's warnings (setuptools prints dozens) do not bury what follows.
quietly() {
    local log status=0
    log="$(mktemp)"
    "$@" >"$log" 2>&1 || status=$?
    if [[ $status -ne 0 ]]; then
        cat "$log" >&2
        echo "setup: '$*' failed (exit $status); its output is above" >&2
    fi
    rm -f "$log"
    return "$status"
}
