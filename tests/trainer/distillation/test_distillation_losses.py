"""Distillation losses on engine-layout micro-batches: estimator and top-k losses, PG vs supervised, the PPO mix."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from verl.base_config import ConfigError
from verl.trainer.distillation import (
    DistillationConfig,
    DistillationLossConfig,
    DistillationLossSettings,
    distillation_loss,
    distillation_ppo_loss,
    get_distillation_loss_fn,
    is_distillation_enabled,
)
from verl.trainer.distillation.fsdp.losses import chunked_topk_log_probs, compute_forward_kl_topk
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.utils.extras import MissingExtraError
from verl.utils.metric import AggregationType, Metric
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

P, R, K = 3, 4, 2


def batch(rows: int = 3, topk: int = 1) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    attention_mask = torch.ones(rows, P + R, dtype=torch.long)
    attention_mask[1, -2:] = 0
    td = TensorDict(
        {
            "prompts": torch.randint(2, 9, (rows, P), generator=gen),
            "responses": torch.randint(2, 9, (rows, R), generator=gen),
            "attention_mask": attention_mask,
            "position_ids": torch.clamp(attention_mask.cumsum(-1) - 1, min=0),
            "response_mask": attention_mask[:, P:].clone(),
            "old_log_probs": -torch.rand(rows, R, generator=gen),
            "advantages": torch.randn(rows, R, generator=gen),
            "teacher_logprobs": -torch.rand(rows, P + R, topk, generator=gen),
            "teacher_ids": torch.randint(0, 6, (rows, P + R, topk), generator=gen),
        },
        batch_size=[rows],
    )
    td.set("input_ids", torch.cat([td["prompts"], td["responses"]], 1))
    return left_right_2_no_padding(td)


def student_output(data: TensorDict) -> dict[str, torch.Tensor]:
    offsets = data["input_ids"].offsets()
    flat = -torch.rand(int(offsets[-1]), generator=torch.Generator().manual_seed(3)).requires_grad_()
    return {"log_probs": torch.nested.nested_tensor_from_jagged(flat, offsets=offsets)}


def padded(data, output):
    mask = data["response_mask"].bool()
    student = no_padding_2_padding(output["log_probs"], data)
    teacher = no_padding_2_padding(data["teacher_logprobs"], data).squeeze(-1)
    return student, teacher, mask


def test_supervised_estimator_loss_is_the_aggregated_kl_estimate():
    actor = ActorConfig(ppo_mini_batch_size=3)
    config = DistillationConfig(distillation_loss=DistillationLossConfig(loss_mode="k3", use_policy_gradient=False))
    data = batch()
    output = student_output(data)
    loss, metrics = distillation_loss(actor, config, output, data)
    student, teacher, mask = padded(data, output)
    expected = agg_loss(kl_penalty(student, teacher, "k3").clamp(-10, 10), mask, "token-mean")
    torch.testing.assert_close(loss, expected)
    assert loss.requires_grad
    assert metrics["distillation/loss_max"].aggregation is AggregationType.MAX
    assert isinstance(metrics["distillation/abs_loss"], Metric)


def test_policy_gradient_mode_uses_the_negated_loss_as_advantage():
    actor = ActorConfig(ppo_mini_batch_size=3)
    config = DistillationConfig(distillation_loss=DistillationLossConfig(loss_mode="k1", loss_max_clamp=0.3))
    data = batch()
    output = student_output(data)
    loss, metrics = distillation_loss(actor, config, output, data)
    student, teacher, mask = padded(data, output)
    advantages = -(student - teacher).clamp(-0.3, 0.3).detach()
    expected, _ = get_policy_loss_fn("vanilla")(
        data["old_log_probs"], student, advantages, mask, loss_agg_mode="token-mean", config=config.distillation_loss
    )
    torch.testing.assert_close(loss, expected)
    assert "distillation/pg_clipfrac" in metrics and not any(k.startswith("actor/") for k in metrics)


def test_ppo_mix_adds_the_weighted_distillation_loss():
    actor = ActorConfig(ppo_mini_batch_size=3)
    data = batch()
    output = student_output(data)
    mixed = DistillationConfig(
        distillation_loss=DistillationLossConfig(loss_mode="k3", use_policy_gradient=False, distillation_loss_coef=0.5)
    )
    total, metrics = distillation_ppo_loss(actor, mixed, output, data)
    distill, _ = distillation_loss(actor, mixed, output, data)
    policy, _ = ppo_loss(actor, output, data)
    torch.testing.assert_close(total, policy + 0.5 * distill)
    assert "actor/pg_loss" in metrics and metrics["distillation/loss"].aggregation is AggregationType.SUM
    only = DistillationConfig(
        distillation_loss=DistillationLossConfig(
            loss_mode="k3", use_policy_gradient=False, use_task_rewards=False, distillation_loss_coef=0.5
        )
    )
    total, metrics = distillation_ppo_loss(actor, only, output, data)
    torch.testing.assert_close(total, distill)  # the coefficient only weighs against task rewards
    assert "actor/pg_loss" not in metrics


def brute_force_topk_kl(logits, teacher_log_probs, teacher_ids, floor):
    student = F.log_softmax(logits.float(), -1).gather(-1, teacher_ids).clamp_min(floor)
    teacher = teacher_log_probs.clamp_min(floor)
    return (teacher.exp() * (teacher - student)).sum(-1)


def test_forward_kl_topk_matches_the_definition_and_its_chunked_form():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 5, 7, generator=gen)
    teacher_ids = torch.stack([torch.randperm(7, generator=gen)[:K] for _ in range(5)]).unsqueeze(0)
    teacher = torch.log_softmax(torch.randn(1, 5, 7, generator=gen), -1).gather(-1, teacher_ids)
    config = DistillationConfig(
        distillation_loss=DistillationLossConfig(loss_mode="forward_kl_topk", topk=K, use_policy_gradient=False)
    )
    out = compute_forward_kl_topk(logits, teacher, teacher_ids, config)
    torch.testing.assert_close(out["distillation_losses"], brute_force_topk_kl(logits, teacher, teacher_ids, -10.0))
    torch.testing.assert_close(out["teacher_mass"], teacher.exp().sum(-1))
    student_top = torch.topk(logits, K, -1).indices
    overlap = torch.tensor(
        [[len(set(a.tolist()) & set(b.tolist())) for a, b in zip(t, s)] for t, s in zip(teacher_ids, student_top)]
    )
    assert torch.equal(out["overlap_count"], overlap)
    chunked = DistillationConfig(
        distillation_loss=DistillationLossConfig(
            loss_mode="forward_kl_topk", use_policy_gradient=False, use_chunked_topk=True, chunked_topk_chunk_size=2
        )
    )
    for key, value in compute_forward_kl_topk(logits, teacher, teacher_ids, chunked).items():
        torch.testing.assert_close(value, out[key])
    torch.testing.assert_close(
        chunked_topk_log_probs(logits, teacher_ids, 3), F.log_softmax(logits, -1).gather(-1, teacher_ids)
    )


def test_topk_loss_through_the_logits_processor_and_the_final_loss():
    actor = ActorConfig(ppo_mini_batch_size=3)
    config = DistillationConfig(
        distillation_loss=DistillationLossConfig(loss_mode="forward_kl_topk", topk=K, use_policy_gradient=False)
    )
    data = batch(topk=K)
    total = int(data["input_ids"].offsets()[-1])
    logits = torch.randn(1, total, 6, generator=torch.Generator().manual_seed(2))
    outputs = distillation_ppo_loss(actor, config, data=data, student_logits=logits)
    assert all(value.shape == (1, total) for value in outputs.values())
    offsets = data["input_ids"].offsets()
    model_output = {
        key: torch.nested.nested_tensor_from_jagged(value[0], offsets=offsets) for key, value in outputs.items()
    }
    losses, metrics = get_distillation_loss_fn("forward_kl_topk")(actor, config, model_output, data)
    assert (losses >= 0).all() and metrics["distillation/teacher_mass"] > 0  # random teacher: not normalised
    assert 0 <= metrics["distillation/overlap_ratio"] <= 1
    with pytest.raises(MissingExtraError, match=r"megatron.*verl\[megatron\]"):
        distillation_ppo_loss(
            ActorConfig(ppo_mini_batch_size=3, strategy="megatron"), config, data=data, student_logits=logits
        )


def test_configs_and_switch():
    assert not is_distillation_enabled(None) and not is_distillation_enabled({"enabled": False})
    assert is_distillation_enabled(DistillationConfig(enabled=True))
    assert DistillationLossConfig(loss_mode="forward_kl_topk").loss_settings.use_topk
    with pytest.raises(ConfigError, match="loss_mode"):
        DistillationLossConfig(loss_mode="k1", use_policy_gradient=False)
    with pytest.raises(ValueError, match="unknown distillation loss 'js'.*forward_kl_topk"):
        DistillationLossConfig(loss_mode="js")
    with pytest.raises(ValueError, match="exactly one"):
        DistillationLossSettings(names="x", use_topk=True, use_estimator=True)
    nested = DistillationConfig(distillation_loss={"loss_mode": "k2", "use_policy_gradient": False})
    assert nested.distillation_loss.loss_mode == "k2"
