#!/usr/bin/env bash
# GRPO on GSM8K with Qwen2.5-0.5B-Instruct on one GPU node (8 GPUs by default).
# Prepare the data first: python3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k
# MODEL may be a hub id (downloaded on your machine) or a local checkpoint folder.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
NGPUS=${NGPUS:-8}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=512 \
    data.max_response_length=512 \
    data.filter_overlong_prompts=true \
    model.path="$MODEL" \
    model.use_remove_padding=true \
    model.enable_gradient_checkpointing=true \
    actor.optim.lr=1e-6 \
    actor.ppo_mini_batch_size=64 \
    actor.ppo_micro_batch_size_per_gpu=16 \
    actor.log_prob_micro_batch_size_per_gpu=32 \
    actor.use_kl_loss=true \
    actor.kl_loss_coef=0.001 \
    actor.kl_loss_type=low_var_kl \
    actor.entropy_coeff=0 \
    rollout.name=hf \
    rollout.n=5 \
    rollout.calculate_log_probs=true \
    trainer.device=cuda \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.nnodes=1 \
    trainer.total_epochs=15 \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.logger=[console,file,tensorboard] \
    trainer.project_name=verl_grpo_gsm8k \
    trainer.experiment_name=qwen2_5_0_5b_grpo \
    "$@"
