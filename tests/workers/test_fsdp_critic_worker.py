"""CriticWorker on 2 CPU ranks (gloo) against the same critic computed in the test process without FSDP: values,
one update, and a checkpoint round trip."""

from __future__ import annotations

import os

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForTokenClassification

from verl.protocol import DataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.config import FSDPCriticConfig
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.fsdp.model_loader import load_critic_model
from verl.workers.fsdp.optimizer import build_optimizer
from verl.workers.fsdp.worker_config import with_rank_sizes
from verl.workers.fsdp_workers import CriticWorker

pytestmark = pytest.mark.ray


def critic_config(model_path) -> OmegaConf:
    return OmegaConf.create(
        {
            "model": {"path": str(model_path)},
            "ppo_mini_batch_size": 4,
            "ppo_micro_batch_size_per_gpu": 2,
            "forward_micro_batch_size_per_gpu": 2,
            "ppo_epochs": 2,
            "cliprange_value": 0.5,
            "optim": {"lr": 1e-2},
            "checkpoint": {"save_contents": ["model", "optimizer", "extra", "hf_model"]},
        }
    )


def make_batch() -> DataProto:
    gen = torch.Generator().manual_seed(0)
    prompt_len, resp_len = 5, 4
    ids = torch.randint(5, 100, (4, prompt_len + resp_len), generator=gen)
    attention = torch.ones_like(ids)
    attention[1, :2] = 0
    response_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    attention[:, prompt_len:] = response_mask
    return DataProto.from_dict(
        {
            "input_ids": ids * attention,
            "attention_mask": attention,
            "position_ids": compute_position_id_with_mask(attention),
            "responses": ids[:, prompt_len:] * response_mask,
            "response_mask": response_mask,
            "returns": torch.randn(4, resp_len, generator=gen),
        }
    )


@pytest.fixture(scope="module")
def critic_group(ray_cluster, tiny_model_dir):
    pool = RayResourcePool([2], use_gpu=False)
    config = critic_config(tiny_model_dir)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(CriticWorker, config=config))
    group.init_model()
    yield group
    group.shutdown()
    pool.release()


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    """The same critic in this process, unsharded (the worker seeds torch with trainer.seed=1 before loading)."""
    cfg = FSDPCriticConfig(
        **{
            k: v
            for k, v in OmegaConf.to_container(critic_config(tiny_model_dir)).items()
            if k not in ("model", "optim")
        }
    )
    torch.manual_seed(1)
    model = load_critic_model(OmegaConf.create({"path": str(tiny_model_dir)}), str(tiny_model_dir), torch.float32)
    optimizer = build_optimizer(model.parameters(), OmegaConf.create({"lr": 1e-2}), key="critic.optim")
    return DataParallelPPOCritic(with_rank_sizes(cfg, "critic", rollout_n=1, dp_size=1), model, optimizer)


def test_values_update_and_resume_match_unsharded_critic(critic_group, reference, tmp_path):
    batch = make_batch()
    values = critic_group.compute_values(batch).batch["values"]
    batch.meta_info["micro_batch_size"] = 2
    expected = reference.compute_values(batch)
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=1e-5)
    assert (values[batch.batch["response_mask"] == 0] == 0).all()

    train = batch.union(DataProto.from_dict({"values": values}))
    train.meta_info.pop("micro_batch_size")
    path = str(tmp_path / "critic")
    critic_group.save_checkpoint(path, global_step=4)
    exported = AutoModelForTokenClassification.from_pretrained(os.path.join(path, "huggingface")).eval()
    with torch.no_grad():
        head = exported(
            input_ids=batch.batch["input_ids"],
            attention_mask=batch.batch["attention_mask"],
            position_ids=batch.batch["position_ids"],
        ).logits[:, -5:-1, 0]
    torch.testing.assert_close(head * batch.batch["response_mask"], values, atol=1e-5, rtol=1e-5)
    metrics = critic_group.update_critic(train).meta_info["metrics"]
    ref_metrics = reference.update_critic(train)
    assert metrics["critic/grad_norm"][:2] == pytest.approx(ref_metrics["critic/grad_norm"], rel=1e-4)
    after = critic_group.compute_values(batch).batch["values"]
    torch.testing.assert_close(after, reference.compute_values(batch), atol=2e-5, rtol=1e-4)
    assert (after - values).abs().max() > 1e-3

    assert critic_group.load_checkpoint(path) == [{"global_step": 4, "extra_state": None}] * 2
    again = critic_group.update_critic(train).meta_info["metrics"]
    assert again["critic/vf_loss"] == pytest.approx(metrics["critic/vf_loss"], abs=1e-6)
    torch.testing.assert_close(critic_group.compute_values(batch).batch["values"], after, atol=1e-6, rtol=0)
