#!/usr/bin/env bash
# PPO with GAE and a critic on the synthetic target-digit task with the tiny model, on CPU with 2 processes.
# Extra arguments are passed on as Hydra overrides, e.g. trainer.total_training_steps=20.
set -euo pipefail
DATA_DIR=${DATA_DIR:-$HOME/data/synthetic/target_digit}
python3 examples/data_preprocess/synthetic.py --task target_digit --local_dir "$DATA_DIR" \
    --train_size 4096 --test_size 64 --seed 0

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=32 \
    data.max_prompt_length=16 \
    data.max_response_length=8 \
    model.path=verl:tiny-demo \
    actor.optim.lr=1e-3 \
    actor.ppo_mini_batch_size=32 \
    actor.ppo_micro_batch_size_per_gpu=64 \
    actor.log_prob_micro_batch_size_per_gpu=64 \
    critic.optim.lr=1e-3 \
    critic.ppo_micro_batch_size_per_gpu=64 \
    rollout.n=4 \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.total_training_steps=200 \
    trainer.test_freq=50 \
    trainer.logger=[console,file] \
    trainer.project_name=verl_examples \
    trainer.experiment_name=tiny_ppo_gae_cpu \
    "$@"
