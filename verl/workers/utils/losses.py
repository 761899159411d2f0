"""Loss functions of verl's model-engine API: ``loss_fn(config, model_output, data, dp_group) -> (loss, metrics)``.

An engine (:mod:`verl.workers.engine`) runs the model over one micro-batch of a no-padding batch
(:mod:`verl.workers.utils.padding`) and hands the loss function ``model_output`` (jagged per-token ``log_probs`` /
``entropy`` / ``values``) and the micro-batch. The batch carries the mini-batch-wide counts the engine computed
(``dp_size``, ``batch_num_tokens``, ``global_batch_size``), so each micro-batch's loss is its share of the
mini-batch loss and the accumulated gradient does not depend on how the mini-batch was split. Metrics of such
partial losses reduce by sum (:class:`~verl.utils.metric.AggregationType`).

The algorithms are this package's: policy losses from :func:`~verl.trainer.ppo.core_algos.get_policy_loss_fn`,
:func:`~verl.trainer.ppo.core_algos.agg_loss`, :func:`~verl.trainer.ppo.core_algos.kl_penalty` and
:func:`~verl.trainer.ppo.core_algos.compute_value_loss`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict

from verl.trainer.ppo._util import as_actor_config, as_critic_config
from verl.trainer.ppo.core_algos import agg_loss, compute_value_loss, get_policy_loss_fn, kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.utils.torch_functional import masked_mean, masked_sum
from verl.workers.utils.padding import no_padding_2_padding

__all__ = ["ppo_loss", "sft_loss", "value_loss"]


def _batch_value(data: TensorDict, key: str, default: Any = None) -> Any:
    value = tu.get_non_tensor_data(data, key, default)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _global_counts(data: TensorDict) -> dict[str, Any]:
    return {
        "dp_size": int(_batch_value(data, "dp_size", 1) or 1),
        "batch_num_tokens": _batch_value(data, "batch_num_tokens"),
        "global_batch_size": _batch_value(data, "global_batch_size"),
    }


def _aggregation(counts: dict[str, Any], loss_scale_factor: Any) -> AggregationType:
    """Sum when the loss is a share of a global-batch loss, else the mean over micro-batches."""
    partial = (
        counts["dp_size"] > 1
        or counts["batch_num_tokens"] is not None
        or counts["global_batch_size"] is not None
        or loss_scale_factor is not None
    )
    return AggregationType.SUM if partial else AggregationType.MEAN


def _padded(data: TensorDict, key: str) -> torch.Tensor:
    value = data.get(key)
    return torch.nested.to_padded_tensor(value, 0.0) if value.is_nested else value


def ppo_loss(
    config: Any, model_output: dict[str, torch.Tensor], data: TensorDict, dp_group: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """PPO policy loss of one micro-batch (``config``: the actor config).

    Reads ``response_mask``, ``old_log_probs``, ``advantages`` (and ``rollout_is_weights``, ``ref_log_prob`` when
    present) from ``data``; subtracts ``entropy_coeff`` times the entropy when the engine computed entropy, adds
    ``kl_loss_coef`` times the KL to the reference when ``use_kl_loss``.
    """
    config = as_actor_config(config)
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy")
    counts = _global_counts(data)
    loss_scale_factor = config.loss_scale_factor
    info = {**counts, "loss_scale_factor": loss_scale_factor}
    view = dataclasses.replace(config, global_batch_info=info)
    aggregation = _aggregation(counts, loss_scale_factor)
    agg_mode = config.loss_agg_mode
    agg_kwargs = {k: v for k, v in info.items() if v is not None}

    response_mask = _padded(data, "response_mask").bool()
    rollout_is_weights = _padded(data, "rollout_is_weights") if "rollout_is_weights" in data.keys() else None
    pg_loss, pg_metrics = get_policy_loss_fn(config.policy_loss.loss_mode)(
        old_log_prob=_padded(data, "old_log_probs"),
        log_prob=log_prob,
        advantages=_padded(data, "advantages"),
        response_mask=response_mask,
        loss_agg_mode=agg_mode,
        config=view,
        rollout_is_weights=rollout_is_weights,
    )
    metrics: dict[str, Any] = Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN)
    metrics["actor/pg_loss"] = Metric(aggregation, pg_loss)
    loss = pg_loss
    if entropy is not None:
        entropy_loss = agg_loss(no_padding_2_padding(entropy, data), response_mask, agg_mode, **agg_kwargs)
        loss = loss - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(aggregation, entropy_loss)
    if config.use_kl_loss:
        if "ref_log_prob" not in data.keys():
            raise KeyError("ppo_loss: use_kl_loss is set but the batch has no 'ref_log_prob'")
        kld = kl_penalty(log_prob, _padded(data, "ref_log_prob"), config.kl_loss_type)
        kl_loss = agg_loss(kld, response_mask, agg_mode, **agg_kwargs)
        coef = float(config.kl_loss_coef)
        loss = loss + coef * kl_loss
        metrics["kl_loss"] = Metric(aggregation, kl_loss)
        metrics["kl_coef"] = coef
    return loss, metrics


def value_loss(
    config: Any, model_output: dict[str, torch.Tensor], data: TensorDict, dp_group: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clipped value loss of one micro-batch (``config``: the critic config; ``cliprange_value``,
    ``loss_agg_mode``). Reads ``values`` (rollout-time), ``returns`` and ``response_mask`` from ``data``."""
    config = as_critic_config(config)
    vpreds = no_padding_2_padding(model_output["values"], data)
    counts = _global_counts(data)
    loss_scale_factor = config.loss_scale_factor
    response_mask = _padded(data, "response_mask").bool()
    vf_loss, vf_clipfrac = compute_value_loss(
        vpreds=vpreds,
        returns=_padded(data, "returns"),
        values=_padded(data, "values"),
        response_mask=response_mask,
        cliprange_value=config.cliprange_value,
        loss_agg_mode=config.loss_agg_mode,
        loss_scale_factor=loss_scale_factor,
        **counts,
    )
    metrics = {
        "critic/vf_loss": Metric(_aggregation(counts, loss_scale_factor), vf_loss),
        "critic/vf_clipfrac": float(vf_clipfrac.item()),
        "critic/vpred_mean": float(masked_mean(vpreds, response_mask).detach().item()),
    }
    return vf_loss, metrics


def sft_loss(
    config: Any, model_output: dict[str, torch.Tensor], data: TensorDict, dp_group: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Negative log-likelihood of the loss-masked tokens, as this micro-batch's share of the mini-batch mean.

    No-padding batches (the default ``pad_mode``) carry a jagged ``loss_mask`` over each whole sequence, which is
    shifted by one token to line up with the log-probs (position ``t`` scores token ``t + 1``); padded batches
    score the ``response_mask`` positions.
    """
    counts = _global_counts(data)
    tokens = counts["batch_num_tokens"]
    log_prob = model_output["log_probs"]
    pad_mode = _batch_value(data, "pad_mode", "no_padding")
    if str(getattr(pad_mode, "value", pad_mode)) == "no_padding":
        values = log_prob.values() if log_prob.is_nested else log_prob
        mask = data.get("loss_mask")
        mask = mask.values() if mask.is_nested else mask.reshape(-1)
        mask = torch.roll(mask, shifts=-1, dims=0).to(values.dtype)
    else:
        values = log_prob
        mask = _padded(data, "response_mask").to(values.dtype)
    if tokens is None:
        tokens = mask.sum().clamp(min=1)
    return -masked_sum(values, mask) / tokens * counts["dp_size"], {}
