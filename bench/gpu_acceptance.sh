#!/usr/bin/env bash
# One command for a short loan of a GPU machine (about ten minutes, no network):
#   bench/gpu_acceptance.sh [--dry-run] [OUTDIR]        (OUTDIR: $OUT when set, else ./gpu-acceptance)
# Checks that there is a GPU, installs gpuscope from a local wheel folder when it is not
# importable (GPUSCOPE_WHEELS, default .whl/), then runs bench/gpu_acceptance.py: every step
# with its own time limit inside 9 minutes. docs/gpu-acceptance.md says how to prepare it.
set -u
cd "$(dirname "$0")/.."
dry=""
outdir=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry="--dry-run" ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_acceptance: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) outdir="$arg" ;;
  esac
done
py="${PYTHON:-python3}"

has_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then return 0; fi
  if command -v amd-smi >/dev/null 2>&1 && amd-smi list 2>/dev/null | grep -q '^GPU'; then return 0; fi
  [ -e /dev/nvidia0 ] || [ -e /dev/kfd ]
}
if [ -z "$dry" ] && ! has_gpu; then
  echo "gpu_acceptance: no NVIDIA or AMD GPU on this machine (nvidia-smi and amd-smi list none, no /dev/nvidia0 or /dev/kfd); use --dry-run to check the script on the fakes" >&2
  exit 2
fi

if ! "$py" -c "import gpuscope.cli, duckdb" >/dev/null 2>&1; then
  wheels="${GPUSCOPE_WHEELS:-.whl}"
  if ls "$wheels"/*.whl >/dev/null 2>&1; then
    # --target beside the interpreter's own packages: a CUDA torch already there is kept
    site="${TMPDIR:-/tmp}/gpuscope-site"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl \
      || { echo "gpu_acceptance: installing the wheels in $wheels failed (see docs/gpu-acceptance.md)" >&2; exit 1; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  elif ! "$py" -m pip install -q -e . >/dev/null 2>&1; then
    echo "gpu_acceptance: gpuscope is not importable, there is no wheel folder ($wheels) and pip cannot install it here (no network?): see docs/gpu-acceptance.md" >&2
    exit 2
  fi
fi
exec "$py" bench/gpu_acceptance.py $dry ${outdir:+"$outdir"}
