#!/usr/bin/env bash
# End-to-end check for CI: a short multi-turn SFT warm-up on calculator transcripts (loss on assistant turns only),
# then a few GRPO steps through ToolAgentLoop with the real CalculatorTool (CPU, 2 worker processes).
# Checks (examples/multi_turn/tool_metrics_table.py --check): every GRPO step is in metrics.jsonl with a finite
# reward, the tool-call counter is logged (agent_loop/... or timing_s/agent_loop/...) and the model called the tool.
# It does not assert a reward rise: the longer demo did not show one on this CPU (docs/tools.md, "Demo").
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
python3 examples/multi_turn/tool_metrics_table.py "$WORK/grpo" --window 1 --check "$STEPS"
echo "e2e tool agent: passed"
