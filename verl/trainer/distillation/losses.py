"""On-policy distillation losses: pull the student (the policy) towards a teacher on the student's own samples.

Two families, registered by name (``distillation.distillation_loss.loss_mode``):

* single-sample estimators (``k1``/``kl``, ``abs``, ``k2``/``mse``, ``k3``/``low_var_kl``): the per-token KL estimate
  between the student's and the teacher's log-probability of the sampled token
  (:func:`verl.trainer.ppo.core_algos.kl_penalty` with the student as ``logprob`` and the teacher as reference). The
  batch carries the teacher's log-probs as ``teacher_logprobs``.
* ``forward_kl_topk``: KL(teacher || student) over the teacher's top-k tokens (``teacher_logprobs``/``teacher_ids``
  of shape ``[.., k]``). It needs the student's full logits, so it runs inside the engine's logits processor
  (:func:`compute_topk_loss`, called by :func:`distillation_ppo_loss` with ``student_logits``) and the final loss only
  post-processes its outputs.

:func:`distillation_loss` turns the per-token losses into one scalar, either as a supervised loss (aggregated like the
policy loss) or, with ``use_policy_gradient``, as the negated advantage of a clipped policy-gradient step.
:func:`distillation_ppo_loss` is the loss function an engine calls (``loss_fn(config, model_output, data,
dp_group)``): the distillation loss, plus the PPO loss on task rewards when ``use_task_rewards``.

The inputs follow verl's engine API (:mod:`verl.workers.utils.losses`): per-token model outputs in the no-padding
layout, mini-batch counts (``dp_size``, ``batch_num_tokens``, ``global_batch_size``) in the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict

from verl.base_config import BaseConfig
from verl.trainer.ppo._util import as_actor_config, as_distillation_config
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.config.actor import ActorConfig
from verl.workers.config.distillation import DistillationLossConfig
from verl.workers.utils.padding import no_padding_2_padding

__all__ = [
    "DISTILLATION_LOSS_REGISTRY",
    "DISTILLATION_SETTINGS_REGISTRY",
    "DistillationLossFn",
    "DistillationLossSettings",
    "compute_distillation_loss_range",
    "compute_distillation_loss_reverse_kl_estimator",
    "compute_forward_kl_topk",
    "compute_topk_loss",
    "distillation_loss",
    "distillation_ppo_loss",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "is_distillation_enabled",
    "register_distillation_loss",
]

# (actor config, distillation config, model output, micro-batch) -> (per-token losses [B, R], metrics)
DistillationLossFn = Callable[[Any, Any, dict, TensorDict], tuple[torch.Tensor, dict[str, Any]]]

_GLOBAL_COUNTS = ("dp_size", "batch_num_tokens", "global_batch_size")


def is_distillation_enabled(config: Any) -> bool:
    """Whether a ``distillation`` config (dataclass, dict or DictConfig; ``None``: no block) turns distillation on."""
    return config is not None and as_distillation_config(config).enabled


@dataclass
class DistillationLossSettings(BaseConfig):
    """How a registered loss gets its inputs: exactly one of ``use_topk`` (teacher top-k distributions, computed in
    the logits processor) and ``use_estimator`` (the teacher's log-prob of the sampled token)."""

    names: str | list[str] = field(default_factory=list)
    use_topk: bool = False
    use_estimator: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.names, str):
            object.__setattr__(self, "names", [self.names])
        if self.use_topk == self.use_estimator:
            raise ValueError(
                f"DistillationLossSettings: set exactly one of use_topk / use_estimator, got "
                f"use_topk={self.use_topk}, use_estimator={self.use_estimator}"
            )


DISTILLATION_LOSS_REGISTRY: dict[str, DistillationLossFn] = {}
DISTILLATION_SETTINGS_REGISTRY: dict[str, DistillationLossSettings] = {}


def register_distillation_loss(
    settings: DistillationLossSettings,
) -> Callable[[DistillationLossFn], DistillationLossFn]:
    """Register a loss function under every name of ``settings``; a taken name is refused."""

    def decorator(fn: DistillationLossFn) -> DistillationLossFn:
        for name in settings.names:
            if name in DISTILLATION_LOSS_REGISTRY:
                raise ValueError(f"distillation loss {name!r} is already registered")
            DISTILLATION_LOSS_REGISTRY[name] = fn
            DISTILLATION_SETTINGS_REGISTRY[name] = settings
        return fn

    return decorator


def get_distillation_loss_fn(loss_name: str) -> DistillationLossFn:
    if loss_name not in DISTILLATION_LOSS_REGISTRY:
        raise ValueError(
            f"unknown distillation loss {loss_name!r} (distillation.distillation_loss.loss_mode); "
            f"registered: {sorted(DISTILLATION_LOSS_REGISTRY)}"
        )
    return DISTILLATION_LOSS_REGISTRY[loss_name]


def get_distillation_loss_settings(loss_name: str) -> DistillationLossSettings:
    get_distillation_loss_fn(loss_name)  # same error for an unknown name
    return DISTILLATION_SETTINGS_REGISTRY[loss_name]


# ----------------------------------------------------------------------------------------------------- helpers


def _loss_config(distillation_config: Any) -> DistillationLossConfig:
    if distillation_config is None:
        raise ValueError("distillation loss called without a distillation config")
    return as_distillation_config(distillation_config).distillation_loss


def _padded_bool(mask: torch.Tensor) -> torch.Tensor:
    return (mask.to_padded_tensor(0) if mask.is_nested else mask).bool()


def _batch_value(data: TensorDict, key: str) -> Any:
    value = tu.get_non_tensor_data(data, key, None)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _global_batch_info(config: ActorConfig, data: TensorDict) -> dict[str, Any]:
    """The mini-batch counts the engine put in the batch, for aggregating a micro-batch's share of the loss."""
    info = {key: _batch_value(data, key) for key in _GLOBAL_COUNTS}
    info["dp_size"] = int(info["dp_size"] or 1)
    info["loss_scale_factor"] = config.loss_scale_factor
    return info


def compute_distillation_loss_range(
    distillation_losses: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, Metric]:
    """Min and max per-token loss over the response tokens (reduced by min/max across micro-batches and ranks)."""
    selected = distillation_losses[_padded_bool(response_mask)]
    if selected.numel() == 0:
        return {}
    return {
        "distillation/loss_min": Metric(AggregationType.MIN, selected.min().detach()),
        "distillation/loss_max": Metric(AggregationType.MAX, selected.max().detach()),
    }


# --------------------------------------------------------------------------------------------- scalar losses


def distillation_loss(
    config: Any, distillation_config: Any, model_output: dict, data: TensorDict
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The distillation loss of one micro-batch and its metrics (see the module docstring).

    ``config`` is the actor config (``loss_agg_mode``, ``loss_scale_factor``). The per-token losses are clamped to
    ``[-loss_max_clamp, loss_max_clamp]``; with ``use_policy_gradient`` their negation is the advantage of the
    distillation loss's own clipped policy loss (``clip_ratio*`` of the distillation config), else they are
    aggregated over ``response_mask``.
    """
    config = as_actor_config(config)
    distillation_config = as_distillation_config(distillation_config)
    loss_config = _loss_config(distillation_config)
    loss_fn = get_distillation_loss_fn(loss_config.loss_mode)
    losses, metrics = loss_fn(config, distillation_config, model_output, data)
    response_mask = _padded_bool(data["response_mask"])
    metrics.update(compute_distillation_loss_range(losses, response_mask))
    clamp = loss_config.loss_max_clamp
    if clamp is not None:
        losses = losses.clamp(min=-float(clamp), max=float(clamp))  # the lower bound matters for k1
    info = _global_batch_info(config, data)
    agg_mode = config.loss_agg_mode
    if loss_config.use_policy_gradient:
        policy_loss_fn = get_policy_loss_fn(loss_config.policy_loss_mode)
        old_log_prob = data["old_log_probs"]
        old_log_prob = old_log_prob.to_padded_tensor(0.0) if old_log_prob.is_nested else old_log_prob
        weights = data.get("rollout_is_weights", None)
        if weights is not None and weights.is_nested:
            weights = weights.to_padded_tensor(0.0)
        loss, pg_metrics = policy_loss_fn(
            old_log_prob=old_log_prob,
            log_prob=no_padding_2_padding(model_output["log_probs"], data),
            advantages=-losses.detach(),
            response_mask=response_mask,
            loss_agg_mode=agg_mode,
            config=ActorConfig(
                clip_ratio=loss_config.clip_ratio,
                clip_ratio_low=loss_config.clip_ratio_low,
                clip_ratio_high=loss_config.clip_ratio_high,
                global_batch_info=info,
            ),
            rollout_is_weights=weights,
        )
        metrics.update({f"distillation/{key.removeprefix('actor/')}": value for key, value in pg_metrics.items()})
    else:
        counts = {key: value for key, value in info.items() if value is not None}
        loss = agg_loss(losses, response_mask, agg_mode, **counts)
    return loss, metrics


def distillation_ppo_loss(
    config: Any,
    distillation_config: Any,
    model_output: dict | None = None,
    data: TensorDict | None = None,
    dp_group: Any = None,
    student_logits: torch.Tensor | None = None,
    data_format: str = "thd",
) -> Any:
    """The engine's loss function with distillation (bind ``distillation_config`` with ``functools.partial``).

    With ``student_logits`` it is the logits processor of top-k losses (:func:`compute_topk_loss`). Otherwise it
    returns ``(loss, metrics)``: the distillation loss, plus the PPO loss (:func:`verl.workers.utils.losses.ppo_loss`)
    when ``use_task_rewards``; the distillation loss is then weighted by ``distillation_loss_coef``.
    """
    if student_logits is not None:
        return compute_topk_loss(config, distillation_config, data, student_logits, data_format)
    assert model_output is not None  # the engine passes model_output whenever student_logits is not given
    from verl.workers.utils.losses import ppo_loss

    loss_config = _loss_config(distillation_config)
    distill, metrics = distillation_loss(config, distillation_config, model_output, data)
    use_task_rewards = loss_config.use_task_rewards
    total: Any = 0.0
    if use_task_rewards:
        total, policy_metrics = ppo_loss(config, model_output, data, dp_group)
        metrics = {**policy_metrics, **metrics}
    coef = float(loss_config.distillation_loss_coef) if use_task_rewards else 1.0
    total = total + coef * distill
    metrics["distillation/loss"] = Metric(AggregationType.SUM, distill.detach())
    return total, metrics


def compute_topk_loss(
    config: Any, distillation_config: Any, data: TensorDict, student_logits: torch.Tensor, data_format: str = "thd"
) -> dict[str, torch.Tensor]:
    """Top-k losses from the student's logits inside the logits processor; each output is ``[bsz, seqlen]``."""
    strategy = as_actor_config(config).strategy
    if strategy not in ("fsdp", "fsdp2", "veomni"):
        from verl.utils.extras import MissingExtraError, missing_message

        raise MissingExtraError(
            missing_message(
                "verl.trainer.distillation.losses.compute_topk_loss",
                f"the {strategy!r} engine",
                extra="megatron" if strategy == "megatron" else None,
                reason="only the FSDP engine's top-k distillation loss is part of this build",
            )
        )
    from verl.trainer.distillation.fsdp.losses import compute_forward_kl_topk as fsdp_forward_kl_topk

    outputs = fsdp_forward_kl_topk(
        student_logits=student_logits,
        teacher_topk_log_probs=data["teacher_logprobs"],
        teacher_topk_ids=data["teacher_ids"],
        config=distillation_config,
        data_format=data_format,
    )
    expected = tuple(student_logits.shape[:2])
    for key, value in outputs.items():
        if tuple(value.shape) != expected:
            raise ValueError(f"compute_topk_loss: {key} has shape {tuple(value.shape)}, expected {expected}")
    return outputs


# ----------------------------------------------------------------------------------------- per-token losses


@register_distillation_loss(DistillationLossSettings(names=["forward_kl_topk"], use_topk=True))
def compute_forward_kl_topk(
    config: Any, distillation_config: Any, model_output: dict, data: TensorDict
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Per-token KL(teacher || student) over the teacher's top-k, from the logits processor's outputs.

    ``model_output`` holds ``distillation_losses``, ``student_mass`` and ``teacher_mass`` (the probability mass of the
    top-k under each model) and optionally ``overlap_count``/``overlap_token_advantage`` (how many of the teacher's
    top-k the student also ranks top-k). Top-k distributions do not sum to one, so the divergence can come out
    negative; it is floored at 0.
    """
    losses = no_padding_2_padding(model_output["distillation_losses"], data)
    student_mass = no_padding_2_padding(model_output["student_mass"], data)
    teacher_mass = no_padding_2_padding(model_output["teacher_mass"], data)
    mask = _padded_bool(data["response_mask"])
    if not losses.shape == student_mass.shape == teacher_mass.shape == mask.shape:
        raise ValueError(
            f"forward_kl_topk: shapes differ: losses {tuple(losses.shape)}, student_mass "
            f"{tuple(student_mass.shape)}, teacher_mass {tuple(teacher_mass.shape)}, "
            f"response_mask {tuple(mask.shape)}"
        )
    student, teacher = student_mass[mask], teacher_mass[mask]
    metrics: dict[str, Any] = {
        "distillation/student_mass": student.mean().item(),
        "distillation/student_mass_min": Metric(AggregationType.MIN, student.min().detach()),
        "distillation/student_mass_max": Metric(AggregationType.MAX, student.max().detach()),
        "distillation/teacher_mass": teacher.mean().item(),
        "distillation/teacher_mass_min": Metric(AggregationType.MIN, teacher.min().detach()),
        "distillation/teacher_mass_max": Metric(AggregationType.MAX, teacher.max().detach()),
    }
    overlap_count = model_output.get("overlap_count")
    overlap_advantage = model_output.get("overlap_token_advantage")
    if overlap_count is not None and overlap_advantage is not None:
        overlap_count = no_padding_2_padding(overlap_count, data)
        overlap_advantage = no_padding_2_padding(overlap_advantage, data)
        topk = int(_loss_config(distillation_config).topk or 1)
        metrics["distillation/overlap_ratio"] = (overlap_count[mask].float().mean() / topk).item()
        overlapping = mask & (overlap_count > 0)
        metrics["distillation/overlap_token_advantage"] = (
            overlap_advantage[overlapping].mean().item() if overlapping.any() else 0.0
        )
    return losses.clamp_min(0.0), metrics


@register_distillation_loss(
    DistillationLossSettings(names=["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"], use_estimator=True)
)
def compute_distillation_loss_reverse_kl_estimator(
    config: Any, distillation_config: Any, model_output: dict, data: TensorDict
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Per-token estimate of KL(student || teacher) on the sampled tokens (``loss_mode`` names the estimator).

    Reads the student's ``log_probs`` from ``model_output`` and the teacher's ``teacher_logprobs`` (``[.., 1]``)
    from the batch; reports the mean absolute loss (``k1`` can be negative).
    """
    student = no_padding_2_padding(model_output["log_probs"], data)
    teacher = no_padding_2_padding(data["teacher_logprobs"], data)
    if teacher.dim() == student.dim() + 1:
        teacher = teacher.squeeze(-1)
    mask = _padded_bool(data["response_mask"])
    if not teacher.shape == student.shape == mask.shape:
        raise ValueError(
            f"distillation estimator: teacher_logprobs {tuple(teacher.shape)}, student log_probs "
            f"{tuple(student.shape)} and response_mask {tuple(mask.shape)} must have one shape"
        )
    mode = _loss_config(distillation_config).loss_mode
    losses = kl_penalty(logprob=student, ref_logprob=teacher, kl_penalty=mode)
    selected = losses[mask]
    abs_loss = selected.abs().mean().detach() if selected.numel() else torch.zeros(())
    return losses, {"distillation/abs_loss": Metric(AggregationType.MEAN, abs_loss)}
