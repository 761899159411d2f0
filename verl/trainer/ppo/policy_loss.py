"""Policy losses and their registry.

A policy loss is ``fn(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode="token-mean", config=None, rollout_is_weights=None) -> (loss, metrics)``
with [N, R] inputs, a scalar loss to minimise, and float metrics
``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``.

``config`` is the actor config (:class:`~verl.workers.config.ActorConfig`, read by attribute; a
dict, DictConfig or None is converted by :func:`~verl.trainer.ppo._util.as_actor_config`):
``clip_ratio``, ``clip_ratio_low`` / ``clip_ratio_high`` (a larger high bound is DAPO's
clip-higher), ``clip_ratio_c`` (dual-clip bound).
``rollout_is_weights`` [N, R] (importance weights correcting for the rollout engine's
policy differing from the trainer's) multiply the per-token loss before aggregation.
``config.global_batch_info`` (``dp_size``, ``batch_num_tokens``, ``global_batch_size``,
``loss_scale_factor``), when the caller fills it in, goes to :func:`agg_loss` so that the
micro-batch losses add up to the mini-batch loss (see :mod:`verl.trainer.ppo.losses`).

This module holds the registry and the PPO-clip family (vanilla, gspo, gpg, cispo); the
other registered losses live in ``policy_loss_variants`` (sapo, geo_mean, dro, dppo_tv,
dppo_kl), ``policy_loss_cov`` (clip_cov, kl_cov) and ``policy_loss_bypass`` (bypass_mode).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, cast

import torch

from verl.trainer.ppo._util import as_actor_config, same_function
from verl.trainer.ppo.losses import agg_loss
from verl.utils.torch_functional import masked_mean
from verl.workers.config.actor import ActorConfig

__all__ = [
    "POLICY_LOSS_REGISTRY",
    "register_policy_loss",
    "get_policy_loss_fn",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_cispo",
    "compute_policy_loss",
    "registering_into",
    "lookup_in",
    "aggregate",
]

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

POLICY_LOSS_REGISTRY: dict[str, PolicyLossFn] = {}


def registering_into(registry: MutableMapping[str, PolicyLossFn], name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """The decorator :func:`register_policy_loss` returns, writing into ``registry``.

    Re-registering the same function is a no-op; a different function under a taken name raises.
    """

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        existing = registry.get(name)
        if existing is not None and not same_function(existing, fn):
            raise ValueError(
                f"Policy loss {name!r} is already registered to {existing.__module__}.{existing.__qualname__}; "
                f"refusing to replace it with {fn.__module__}.{fn.__qualname__}"
            )
        registry[name] = fn
        return fn

    return decorator


def lookup_in(registry: Mapping[str, PolicyLossFn], name: str) -> PolicyLossFn:
    """``registry[name]``; an unknown name raises ValueError listing the registered ones."""
    if name not in registry:
        raise ValueError(f"Unknown policy loss {name!r} (actor.policy_loss.loss_mode); registered: {sorted(registry)}")
    return registry[name]


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss under ``name`` (``actor.policy_loss.loss_mode``)."""
    return registering_into(POLICY_LOSS_REGISTRY, name)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """Return the policy loss registered under ``name``; unknown names list the registered ones."""
    return lookup_in(POLICY_LOSS_REGISTRY, name)


# ----------------------------------------------------------------------------- helpers


def _clip_bounds(config: ActorConfig) -> tuple[float, float, float]:
    # ActorConfig.__post_init__ fills clip_ratio_low / clip_ratio_high from clip_ratio
    low, high = float(cast(float, config.clip_ratio_low)), float(cast(float, config.clip_ratio_high))
    clip_c = float(config.clip_ratio_c)
    if low < 0 or high < 0:
        raise ValueError(f"actor.clip_ratio_low / clip_ratio_high must be >= 0, got {low} / {high}")
    if clip_c <= 1.0:
        raise ValueError(f"actor.clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_c}")
    return low, high, clip_c


def _log_ratio(old_log_prob: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    if not (old_log_prob.shape == log_prob.shape == response_mask.shape):
        raise ValueError(
            f"policy loss: old_log_prob {tuple(old_log_prob.shape)}, log_prob {tuple(log_prob.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must have the same shape"
        )
    # Clamped so a wildly stale sample cannot overflow exp(); the clip makes its gradient 0 anyway.
    return torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)


def _apply_is_weights(pg_losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    if rollout_is_weights is None:
        return pg_losses
    if rollout_is_weights.shape != pg_losses.shape:
        raise ValueError(
            f"rollout_is_weights shape {tuple(rollout_is_weights.shape)} must match the per-token loss "
            f"shape {tuple(pg_losses.shape)}"
        )
    return pg_losses * rollout_is_weights.detach()


_GLOBAL_BATCH_KEYS = ("dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor")


def aggregate(pg_losses: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str, config: Any) -> torch.Tensor:
    """:func:`agg_loss` with the global-batch normalisation the config carries (``global_batch_info``)."""
    config = as_actor_config(config)
    info = config.global_batch_info or {}
    kwargs = {key: info[key] for key in _GLOBAL_BATCH_KEYS if info.get(key) is not None}
    if "loss_scale_factor" not in kwargs and config.loss_scale_factor is not None:
        kwargs["loss_scale_factor"] = config.loss_scale_factor
    return agg_loss(pg_losses, response_mask, loss_agg_mode, **kwargs)


def _metrics(ppo_kl: torch.Tensor, clipfrac: torch.Tensor | float, clipfrac_lower: torch.Tensor | float) -> dict:
    def _f(x: torch.Tensor | float) -> float:
        return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)

    return {
        "actor/pg_clipfrac": _f(clipfrac),
        "actor/ppo_kl": _f(ppo_kl),
        "actor/pg_clipfrac_lower": _f(clipfrac_lower),
    }


# ----------------------------------------------------------------------------- losses


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric bounds and dual clip.

    Per token: max(-A*r, -A*clip(r, 1-low, 1+high)); for A < 0 this is further capped at
    -A*clip_ratio_c, so a token whose ratio exploded cannot dominate the update
    (dual-clip PPO). ``pg_clipfrac`` counts tokens where the clipped branch won,
    ``pg_clipfrac_lower`` tokens where the dual-clip cap was hit.
    """
    config = as_actor_config(config)
    low, high, clip_c = _clip_bounds(config)
    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)

    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    pessimistic = torch.maximum(unclipped, clipped)
    clipfrac = masked_mean(torch.gt(clipped, unclipped).to(ratio.dtype), response_mask)

    cap = -advantages * clip_c
    dual = torch.minimum(pessimistic, cap)
    clipfrac_lower = masked_mean((torch.gt(pessimistic, cap) & (advantages < 0)).to(ratio.dtype), response_mask)
    pg_losses = torch.where(advantages < 0, dual, pessimistic)

    pg_losses = _apply_is_weights(pg_losses, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    return pg_loss, _metrics(ppo_kl, clipfrac, clipfrac_lower)


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO: PPO clipping on the sequence-level ratio s = exp(mean_t log(pi/pi_old)).

    Each token carries the value s of its sequence while its gradient flows through its own
    log-prob (log s_t = sg(log s) + log p_t - sg(log p_t)), so a token-level advantage still
    works. Clip bounds are ``clip_ratio_low`` / ``clip_ratio_high`` (GSPO uses ~3e-4 / 4e-4);
    the default aggregation is GSPO's ``seq-mean-token-mean``.
    """
    config = as_actor_config(config)
    low, high, _ = _clip_bounds(config)
    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    mask = response_mask.to(log_ratio.dtype)
    seq_log_ratio = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=10.0))
    ppo_kl = masked_mean(-log_ratio, response_mask)

    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    pg_losses = torch.maximum(unclipped, clipped)
    clipfrac = masked_mean(torch.gt(clipped, unclipped).to(ratio.dtype), response_mask)

    pg_losses = _apply_is_weights(pg_losses, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    return pg_loss, _metrics(ppo_kl, clipfrac, 0.0)


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GPG: plain policy gradient -A * log pi, no ratio and no clipping (clip fractions are 0)."""
    config = as_actor_config(config)
    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ppo_kl = masked_mean(-log_ratio, response_mask)
    pg_losses = _apply_is_weights(-advantages * log_prob, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    return pg_loss, _metrics(ppo_kl, 0.0, 0.0)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO: -sg(clip(r, 1-low, 1+high)) * A * log pi.

    Clipping the (stopped-gradient) importance weight instead of the surrogate keeps every
    token's gradient, so rare but important tokens are not silenced once their ratio leaves
    the trust region. ``pg_clipfrac`` / ``pg_clipfrac_lower`` count weights clipped above / below.
    """
    config = as_actor_config(config)
    low, high, _ = _clip_bounds(config)
    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)
    weight = torch.clamp(ratio, 1.0 - low, 1.0 + high).detach()
    clipfrac = masked_mean(torch.gt(ratio, 1.0 + high).to(ratio.dtype), response_mask)
    clipfrac_lower = masked_mean(torch.lt(ratio, 1.0 - low).to(ratio.dtype), response_mask)
    pg_losses = _apply_is_weights(-weight * advantages * log_prob, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    return pg_loss, _metrics(ppo_kl, clipfrac, clipfrac_lower)


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deprecated functional form of :func:`compute_policy_loss_vanilla` with the clip bounds as arguments.

    Returns ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)`` as tensors.
    """
    warnings.warn(
        "compute_policy_loss is deprecated; use compute_policy_loss_vanilla (or get_policy_loss_fn('vanilla')) "
        "with the clip bounds in the actor config",
        DeprecationWarning,
        stacklevel=2,
    )
    if cliprange is None and (cliprange_low is None or cliprange_high is None):
        raise ValueError("compute_policy_loss needs cliprange, or both cliprange_low and cliprange_high")
    config = ActorConfig(
        clip_ratio=cliprange if cliprange is not None else cast(float, cliprange_low),  # checked just above
        clip_ratio_low=cliprange_low,
        clip_ratio_high=cliprange_high,
        clip_ratio_c=clip_ratio_c,
    )
    pg_loss, metrics = compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=loss_agg_mode, config=config
    )
    names = ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower")
    clipfrac, ppo_kl, clipfrac_lower = (torch.tensor(metrics[f"actor/{n}"], device=pg_loss.device) for n in names)
    return pg_loss, clipfrac, ppo_kl, clipfrac_lower
