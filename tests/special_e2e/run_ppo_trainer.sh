#!/usr/bin/env bash
# End-to-end check for CI: a short GRPO run and a short GAE (critic) run on CPU with 2 worker processes,
# each followed by a check that its metrics log has every step and the reward is a number.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export DATA_DIR="$WORK/data"
STEPS=${STEPS:-4}

check_run() {
    python3 - "$1" "$STEPS" <<'PY'
import math, sys
from verl.utils.tracking import read_metrics
records = read_metrics(sys.argv[1])
steps = [r["step"] for r in records if "critic/score/mean" in r]
assert steps == list(range(1, int(sys.argv[2]) + 1)), f"logged steps {steps}"
assert all(math.isfinite(r["critic/score/mean"]) for r in records if "critic/score/mean" in r)
print(f"ok: {sys.argv[1]} logged steps {steps}")
PY
}

bash examples/grpo_trainer/run_tiny_cpu.sh trainer.total_training_steps="$STEPS" trainer.test_freq=-1 \
    trainer.val_before_train=false trainer.logger=[file] trainer.default_local_dir="$WORK/grpo"
check_run "$WORK/grpo"

bash examples/ppo_trainer/run_tiny_cpu.sh trainer.total_training_steps="$STEPS" trainer.test_freq=-1 \
    trainer.val_before_train=false trainer.logger=[file] trainer.default_local_dir="$WORK/gae" trainer.save_freq=2
check_run "$WORK/gae"
test -f "$WORK/gae/global_step_4/actor/huggingface/config.json" -o -d "$WORK/gae/global_step_4/actor"
echo "e2e ppo trainer: passed"
