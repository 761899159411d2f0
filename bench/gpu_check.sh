#!/usr/bin/env bash
# The GPU check in one script, sized for a 15-minute GPU slot (about 8 minutes on an H200, so a rerun fits):
#   1. installs the wheels of ../shared/gpu/wheels.sh from .whl/ when the image lacks ray and friends;
#   2. pytest -m gpu (CUDA-graph decode against eager decode, bf16 kernels, a Ray worker on the GPU);
#   3. bench/gpu_suite.py: rollout tokens/s of the hf engine against model.generate (256 x 256 and a
#      long-tailed row up to 1024 tokens) and the split of one decode step into kernel and host time;
#   4. bench/gpu_update.py: update-step MFU on the 0.5B and 1.5B shapes, with profiles;
#   5. bench/gpu_grpo.py: a whole GRPO step of our colocated trainer against TRL's GRPOTrainer.
# Each stage has its own time limit and log; a failed or cut stage is recorded and the next one still runs.
# Results: gpu_check.md (stage, exit status, seconds) and each script's JSON/Markdown under --out-dir.
#
#   bash bench/gpu_check.sh [--out-dir DIR]        # default bench/results
set -uo pipefail
cd "$(dirname "$0")/.."
out=bench/results
while [ $# -gt 0 ]; do
  case "$1" in
    --out-dir) out=$2; shift 2 ;;
    *) echo "usage: bash bench/gpu_check.sh [--out-dir DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary="$out/gpu_check.md"
export PYTHONUNBUFFERED=1 VERL_CACHE_DIR=${VERL_CACHE_DIR:-/tmp/vc}
if ! python3 -c "import ray, tensordict, hydra, datasets" 2>/dev/null; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "this machine lacks ray/tensordict/hydra and there is no .whl/: run ../shared/gpu/wheels.sh .whl first" >&2
    exit 9
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 9
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  python3 -c "import torch, transformers, sys; print(f'{torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"no CUDA device\"}; torch {torch.__version__}, transformers {transformers.__version__}, Python {sys.version.split()[0]}')"
  echo
  echo "| stage | exit status | seconds |"
  echo "|---|---|---|"
} > "$summary"

stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "[gpu_check $(date +%H:%M:%S)] $name (limit ${limit}s)" >&2
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local status=$rc; [ $rc -eq 124 ] && status="124 (cut at ${limit}s)"
  echo "| $name | $status | $((SECONDS - start)) |" >> "$summary"
  tail -n 30 "$out/$name.log" >&2
}

stage pytest_gpu 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests
stage gpu_suite 170 python3 bench/gpu_suite.py --repeats 1 --out-dir "$out"
stage gpu_update 125 python3 bench/gpu_update.py --out-dir "$out" --budget-s 105
stage gpu_grpo 170 python3 bench/gpu_grpo.py --out-dir "$out" --budget 165
cat "$summary"
