# Shared variables for scripts/*: repository root, cargo target dir, Python venv (source it).
GPUNET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# One cargo target directory outside the checkout, shared by CI runs and clones on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpunet/target}"
VENV="${GPUNET_VENV:-$GPUNET_ROOT/.venv}"
PYTHON="$VENV/bin/python"
export GPUNET_ROOT VENV PYTHON
