#!/usr/bin/env bash
# Warm start, then RL: SFT the tiny model on the arithmetic-sequence task ("2,5,8," -> "11,14,17") with
# main_sft, then GRPO from the SFT export on CPU with 2 worker processes. From a random model GRPO never
# earns reward on this task; after ~150 SFT steps it starts near 0.1-0.2 and rises (docs/learning_results.md).
# Extra arguments are passed on to the GRPO run as Hydra overrides, e.g. trainer.total_training_steps=20.
# SEED sets both runs' trainer.seed and the rollout sampling seed.
set -euo pipefail
SEED=${SEED:-1}
DATA_DIR=${DATA_DIR:-$HOME/data/synthetic/arith_seq}
SFT_DIR=${SFT_DIR:-checkpoints/verl_examples/tiny_arith_sft_s$SEED}
SFT_STEPS=${SFT_STEPS:-150}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

python3 examples/data_preprocess/synthetic.py --task arith_seq --local_dir "$DATA_DIR" \
    --train_size 4096 --test_size 64 --seed 0

python3 -m verl.trainer.main_sft \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.max_length=32 \
    data.train_batch_size=32 \
    data.micro_batch_size_per_gpu=32 \
    model.path=verl:tiny-demo \
    optim.lr=5e-3 \
    optim.lr_warmup_steps_ratio=0.05 \
    trainer.total_training_steps="$SFT_STEPS" \
    trainer.test_freq=-1 \
    trainer.seed="$SEED" \
    trainer.device=cpu \
    trainer.logger=[console,file] \
    trainer.default_local_dir="$SFT_DIR"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=16 \
    data.max_prompt_length=24 \
    data.max_response_length=12 \
    model.path="$SFT_DIR/huggingface" \
    actor.optim.lr=3e-4 \
    actor.ppo_mini_batch_size=16 \
    actor.ppo_micro_batch_size_per_gpu=64 \
    actor.log_prob_micro_batch_size_per_gpu=64 \
    actor.use_kl_loss=false \
    actor.entropy_coeff=0 \
    rollout.n=8 \
    rollout.temperature=1.0 \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.total_training_steps=200 \
    trainer.test_freq=50 \
    trainer.seed="$SEED" \
    rollout.seed="$SEED" \
    trainer.logger=[console,file] \
    trainer.project_name=verl_examples \
    trainer.experiment_name=tiny_sft_then_grpo_cpu \
    "$@"
