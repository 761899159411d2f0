#!/usr/bin/env bash
# End-to-end check for CI: a few SFT steps on calculator transcripts, then a few GRPO steps through ToolAgentLoop
# with the real CalculatorTool (CPU, 2 worker processes). Checks that metrics.jsonl has every GRPO step, the
# reward is a finite number and the model made tool calls (the warm-up teaches the call format).
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export DATA_DIR="$WORK/data" SFT_DIR="$WORK/sft"
export SFT_STEPS=${SFT_STEPS:-60}
STEPS=${STEPS:-3}

bash examples/multi_turn/run_tiny_tool_agent.sh trainer.total_training_steps="$STEPS" data.train_batch_size=4 \
    actor.ppo_mini_batch_size=4 rollout.n=4 trainer.logger=[file] trainer.default_local_dir="$WORK/grpo"

test -f "$SFT_DIR/huggingface/config.json"
python3 - "$WORK/grpo" "$STEPS" <<'PY'
import math, sys
from verl.utils.tracking import read_metrics
records = read_metrics(sys.argv[1])
score, calls = "critic/score/mean", "timing_s/agent_loop/tool_calls/mean"
steps = [r["step"] for r in records if score in r]
assert steps == list(range(1, int(sys.argv[2]) + 1)), f"logged steps {steps}"
assert all(math.isfinite(r[score]) for r in records if score in r)
per_step = [r.get(calls, r.get("agent_loop/tool_calls/mean")) for r in records if score in r]
assert None not in per_step, f"no tool-call metric in the records; keys: {sorted(records[-1])}"
assert sum(per_step) > 0, f"the model made no tool calls: {per_step}"
print(f"ok: steps {steps}, tool calls per trajectory {per_step}, reward {[r[score] for r in records if score in r]}")
PY
echo "e2e tool agent: passed"
