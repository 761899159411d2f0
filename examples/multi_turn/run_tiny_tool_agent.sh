#!/usr/bin/env bash
# Multi-turn tool use on the tiny model, on CPU with 2 worker processes (docs/tools.md, "Demo"):
#   1. Multi-turn SFT warm-up (data.multiturn.enable=true) on synthetic transcripts of the tool_mul3 task
#      ("What is 47*6?", always 2 digits times 1 digit with a 3-digit product): a fraction TOOL_FRACTION of them
#      call <tool_call>{"name": "calculator", "arguments": {"expression": "47*6"}}</tool_call>, read the tool's
#      answer and repeat it; the rest answer directly (and are mostly wrong). The loss covers the assistant turns
#      only, so the model learns to copy the tool's answer, not to guess it. With fixed widths and one token per
#      character every copy is from a fixed offset; the tiny model learns the answer copy after ~600 SFT steps and
#      the operand copy after ~1000-1500 (it varies with the seed).
#   2. GRPO on tool_mul3 through ToolAgentLoop (rows carry agent_name=tool_agent): every rollout runs the real
#      CalculatorTool; reward 1.0 when the last number of the response is the right answer. Calling the tool pays,
#      so the tool-use rate and the reward rise together.
# Watch agent_loop/tool_calls/mean (calls per trajectory; timing_s/agent_loop/... in older builds) and
# critic/score/mean in metrics.jsonl, or print both per window of steps:
#   python examples/multi_turn/tool_metrics_table.py checkpoints/verl_examples/tiny_tool_agent_cpu --window 10
# Extra arguments are passed on to the GRPO run as Hydra overrides, e.g. trainer.total_training_steps=20.
# SFT_STEPS=0 skips the warm-up: GRPO then starts from MODEL_PATH, e.g. SFT_STEPS=0 MODEL_PATH=$SFT_DIR/huggingface
# to reuse an earlier warm-up.
set -euo pipefail
cd "$(dirname "$0")/../.."
SEED=${SEED:-1}
TASK=${TASK:-tool_mul3}
DATA_DIR=${DATA_DIR:-$HOME/data/synthetic/$TASK}
SFT_DIR=${SFT_DIR:-checkpoints/verl_examples/tiny_tool_sft_s$SEED}
SFT_STEPS=${SFT_STEPS:-1500}
SFT_LR=${SFT_LR:-1e-2}
TOOL_FRACTION=${TOOL_FRACTION:-0.5}
TOOL_CONFIG=examples/multi_turn/calculator_tools.yaml
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

python3 examples/data_preprocess/synthetic.py --task "$TASK" --local_dir "$DATA_DIR" \
    --train_size 4096 --test_size 64 --seed 0
python3 -m verl.utils.tool_transcripts --task "$TASK" --local_dir "$DATA_DIR" --train_size 4096 --test_size 64 \
    --seed 0 --tool_config_path "$TOOL_CONFIG" --tool_fraction "$TOOL_FRACTION"

MODEL=${MODEL_PATH:-verl:tiny-demo}
if [ "$SFT_STEPS" -gt 0 ]; then
    python3 -m verl.trainer.main_sft \
        data.train_files="$DATA_DIR/sft_train.parquet" \
        data.val_files="$DATA_DIR/sft_test.parquet" \
        data.multiturn.enable=true \
        data.max_length=288 \
        data.train_batch_size=32 \
        data.micro_batch_size_per_gpu=32 \
        model.path=verl:tiny-demo \
        optim.lr="$SFT_LR" \
        optim.lr_warmup_steps_ratio=0.05 \
        trainer.total_training_steps="$SFT_STEPS" \
        trainer.test_freq=-1 \
        trainer.seed="$SEED" \
        trainer.device=cpu \
        trainer.logger=[console,file] \
        trainer.default_local_dir="$SFT_DIR"
    MODEL="$SFT_DIR/huggingface"
fi

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=8 \
    data.max_prompt_length=224 \
    data.max_response_length=96 \
    model.path="$MODEL" \
    actor.optim.lr=${GRPO_LR:-3e-4} \
    actor.ppo_mini_batch_size=8 \
    actor.ppo_micro_batch_size_per_gpu=32 \
    actor.log_prob_micro_batch_size_per_gpu=32 \
    actor.use_kl_loss=false \
    actor.entropy_coeff=0 \
    rollout.n=8 \
    rollout.temperature=1.0 \
    rollout.multi_turn.enable=true \
    rollout.multi_turn.tool_config_path="$TOOL_CONFIG" \
    rollout.multi_turn.format=hermes \
    rollout.multi_turn.max_assistant_turns=3 \
    rollout.multi_turn.max_parallel_calls=1 \
    rollout.multi_turn.max_tool_response_length=64 \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.total_training_steps=100 \
    trainer.test_freq=-1 \
    trainer.val_before_train=false \
    trainer.seed="$SEED" \
    rollout.seed="$SEED" \
    trainer.logger=[console,file] \
    trainer.project_name=verl_examples \
    trainer.experiment_name=tiny_tool_agent_cpu \
    "$@"
