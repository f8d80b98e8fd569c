#!/usr/bin/env bash
# One command for a short loan of a GPU machine (about ten minutes, no network):
#   bench/gpu_acceptance.sh [--dry-run] [--steps LIST] [OUTDIR]   (OUTDIR: $OUT when set, else ./gpu-acceptance)
# Exits 2 at once without an NVIDIA or AMD GPU. Installs what the interpreter lacks from a local
# wheel folder (GPUSCOPE_WHEELS, default .whl/) and gpuscope from this checkout, offline, into a
# private folder; then runs bench/gpu_acceptance.py: fourteen steps, each with its own time limit
# (525 s in all), inside 9 minutes counted from here. GPUSCOPE_ACCEPTANCE_DRY_RUN=1 is --dry-run (the fakes, no
# GPU needed). PYTHON picks the interpreter (default python3). See docs/gpu-acceptance.md.
set -u
export GPUSCOPE_ACCEPTANCE_DEADLINE="${GPUSCOPE_ACCEPTANCE_DEADLINE:-$(( $(date +%s) + 540 ))}"
cd "$(dirname "$0")/.." || exit 2
repo="$(pwd -P)"
dry=""
case "${GPUSCOPE_ACCEPTANCE_DRY_RUN:-}" in 1|true|yes) dry="--dry-run" ;; esac
passthrough=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry="--dry-run" ;;
    --steps) [ $# -ge 2 ] || { echo "gpu_acceptance: --steps needs a comma-separated list of steps" >&2; exit 2; }
             passthrough+=(--steps "$2"); shift ;;
    --steps=*) passthrough+=(--steps "${1#--steps=}") ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_acceptance: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) passthrough+=("$1") ;;
  esac
  shift
done
py="${PYTHON:-python3}"

has_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then return 0; fi
  if command -v amd-smi >/dev/null 2>&1 && timeout 20 amd-smi list 2>/dev/null | grep -q '^GPU'; then return 0; fi
  [ -e /dev/nvidia0 ] || [ -e /dev/kfd ]
}
if [ -z "$dry" ] && ! has_gpu; then
  echo "gpu_acceptance: no NVIDIA or AMD GPU on this machine (nvidia-smi and amd-smi list none, no /dev/nvidia0 or /dev/kfd); use --dry-run to check the script on the fakes" >&2
  exit 2
fi
command -v "$py" >/dev/null 2>&1 || { echo "gpu_acceptance: no Python interpreter '$py' (set PYTHON)" >&2; exit 2; }

# gpuscope must come from this checkout (its tests and bench scripts run here), with duckdb,
# pyarrow and psutil beside it. What is missing goes into a private folder put first on
# PYTHONPATH, with pip --no-index: the interpreter's own packages (a CUDA build of torch, CuPy,
# nvidia-ml-py) stay as they are and nothing is downloaded.
imports_ok() {
  "$py" - "$repo" <<'EOF' 2>/dev/null
import sys
from pathlib import Path
import duckdb, pyarrow, psutil  # noqa: F401
import gpuscope.cli
sys.exit(0 if Path(gpuscope.__file__).resolve().parents[1] == Path(sys.argv[1]) else 1)
EOF
}
if [ -n "${GPUSCOPE_ACCEPTANCE_REINSTALL:-}" ] || ! imports_ok; then
  wheels="${GPUSCOPE_WHEELS:-.whl}"
  site="${TMPDIR:-/tmp}/gpuscope-acceptance-site"
  rm -rf "$site" && mkdir -p "$site" || { echo "gpu_acceptance: cannot create $site" >&2; exit 2; }
  pipi() { "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
             --upgrade --target "$site" "$@"; }
  deps=()
  for w in "$wheels"/*.whl; do
    [ -e "$w" ] || continue
    case "$(basename "$w")" in gpuscope-*) ;; *) deps+=("$w") ;; esac
  done
  if [ ${#deps[@]} -gt 0 ]; then
    pipi "${deps[@]}" >&2 || { echo "gpu_acceptance: installing the wheels in $wheels failed (one version of each, for this Python and machine: see docs/gpu-acceptance.md)" >&2; exit 2; }
  fi
  # this checkout, built offline with the interpreter's own setuptools; a gpuscope wheel of the
  # folder only when that cannot be done (it may be older than the checkout: the summary says which ran)
  if ! pipi --no-build-isolation "$repo" >/dev/null 2>"$site/.build.log"; then
    own=$(ls "$wheels"/gpuscope-*.whl 2>/dev/null | tail -n 1)
    if [ -z "$own" ] || ! pipi "$own" >&2; then
      echo "gpu_acceptance: cannot install gpuscope from this checkout offline ($(grep -v '^\s*$' "$site/.build.log" | tail -n 1)) and $wheels holds no gpuscope wheel: see docs/gpu-acceptance.md" >&2
      exit 2
    fi
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  missing=$("$py" -c 'import importlib.util as u; print(" ".join(m for m in ("duckdb", "pyarrow", "psutil", "gpuscope") if u.find_spec(m) is None))' 2>&1)
  if [ -n "$missing" ]; then
    echo "gpu_acceptance: $py still cannot import: $missing (put its wheels into $wheels: see docs/gpu-acceptance.md)" >&2
    exit 2
  fi
  if [ "${GPUSCOPE_ACCEPTANCE_INSTALL_ONLY:-}" = 1 ]; then echo "$site"; exit 0; fi
fi
exec "$py" bench/gpu_acceptance.py $dry ${passthrough[@]+"${passthrough[@]}"}
