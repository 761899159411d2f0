"""verl's pipeline with verl's command lines: SFT under torchrun (2 gloo processes) -> model_merger -> GRPO with
main_ppo from the merged folder -> model_merger of the PPO actor checkpoint. Only model path, device and sizes are
this repository's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

REPO_ROOT = Path(__file__).resolve().parents[3]


def _run(args, cwd, timeout):
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, args[:6]))}...\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_sft_merge_grpo_merge(conversation_files, tiny_model_dir, tmp_path):
    train, val = conversation_files["train"], conversation_files["test"]
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            "--nproc_per_node=2",
            "-m",
            "verl.trainer.sft_trainer",
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.messages_key=messages",
            "data.train_batch_size=16",
            "data.micro_batch_size_per_gpu=4",
            "data.max_length=32",
            f"model.path={tiny_model_dir}",
            "engine=fsdp",
            "optim=fsdp",
            "optim.lr=1e-3",
            "trainer.total_training_steps=3",
            f"trainer.default_local_dir={tmp_path}/sft",
            "trainer.device=cpu",
            "trainer.logger=[console]",
            "hydra.run.dir=.",
        ],
        tmp_path,
        timeout=600,
    )
    assert (tmp_path / "sft" / "latest_checkpointed_iteration.txt").read_text() == "3"

    _run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            f"{tmp_path}/sft/global_step_3",
            "--target_dir",
            f"{tmp_path}/sft_hf",
        ],
        tmp_path,
        timeout=300,
    )
    sft_model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft_hf")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.equal(v, base[k]) for k, v in sft_model.state_dict().items())  # trained

    _run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_ppo",
            "algorithm.adv_estimator=grpo",
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.train_batch_size=8",
            "data.max_prompt_length=32",
            "data.max_response_length=8",
            f"actor_rollout_ref.model.path={tmp_path}/sft_hf",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.name=hf",
            "trainer.device=cpu",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=1",
            "trainer.total_training_steps=2",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            "trainer.save_freq=2",
            "trainer.logger=[console,file]",
            f"trainer.default_local_dir={tmp_path}/grpo",
            "hydra.run.dir=.",
        ],
        tmp_path,
        timeout=900,
    )
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "critic/score/mean" in r] == [1, 2]

    _run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            f"{tmp_path}/grpo/global_step_2/actor",
            "--target_dir",
            f"{tmp_path}/grpo_hf",
        ],
        tmp_path,
        timeout=300,
    )
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "grpo_hf").config.architectures == ["LlamaForCausalLM"]
