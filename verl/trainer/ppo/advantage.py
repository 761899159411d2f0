"""Advantage estimators and their registry.

Every estimator is called with keyword arguments (``token_level_rewards`` [N, R],
``response_mask`` [N, R], and as needed ``index`` (prompt group ids, one per row),
``values``, ``reward_baselines``, ``gamma``, ``lam``, ``epsilon``,
``norm_adv_by_std_in_grpo``, ``config``) and returns ``(advantages, returns)``, both [N, R]
and zero outside the response mask.

Groups of size 1 (a prompt with a single response) carry no relative signal: the group
baselines (grpo, rloo, reinforce_plus_plus_baseline, opo, gpg) equal the response's own score, so
its advantage is 0 and the sample does not push the policy anywhere. (Upstream verl uses a
baseline of 0 there, which turns a lone response into plain REINFORCE on the raw score.)

The group estimators are computed with scatter-adds over dense group ids, so the ``*_vectorized``
names verl also registers (``grpo_vectorized``, ``rloo_vectorized``) are the same functions.
The token-level optimal baselines live in :mod:`verl.trainer.ppo.advantage_token_baseline`, the
multi-reward GDPO in :mod:`verl.trainer.ppo.advantage_gdpo`.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from enum import Enum
from typing import Any

import numpy as np
import torch

from verl.trainer.ppo._util import as_algo_config, same_function
from verl.utils.torch_functional import masked_whiten

__all__ = [
    "AdvantageEstimator",
    "ADV_ESTIMATOR_REGISTRY",
    "register_adv_est",
    "get_adv_estimator_fn",
    "registering_into",
    "lookup_in",
    "estimator_name",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_gpg_outcome_advantage",
]

AdvEstimatorFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class AdvantageEstimator(str, Enum):
    """Names of the built-in estimators (``algorithm.adv_estimator``)."""

    GAE = "gae"
    GRPO = "grpo"
    GRPO_PASSK = "grpo_passk"
    RLOO = "rloo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    OPO = "opo"
    GPG = "gpg"
    RLOO_VECTORIZED = "rloo_vectorized"
    GRPO_VECTORIZED = "grpo_vectorized"
    OPTIMAL_TOKEN_BASELINE = "optimal_token_baseline"
    TIR_OPTIMAL_TOKEN_BASELINE = "tir_optimal_token_baseline"
    GDPO = "gdpo"

    def __str__(self) -> str:
        return self.value


ADV_ESTIMATOR_REGISTRY: dict[str, AdvEstimatorFn] = {}


def estimator_name(name: str | Enum) -> str:
    """The registry key of an estimator given by name or enum member."""
    return str(name.value) if isinstance(name, Enum) else str(name)


def registering_into(
    registry: MutableMapping[str, AdvEstimatorFn], name: str | Enum
) -> Callable[[AdvEstimatorFn], AdvEstimatorFn]:
    """The decorator :func:`register_adv_est` returns, writing into ``registry``.

    Re-registering the same function is a no-op; a different function under a taken name
    raises, so two recipes cannot silently shadow each other.
    """
    key = estimator_name(name)

    def decorator(fn: AdvEstimatorFn) -> AdvEstimatorFn:
        existing = registry.get(key)
        if existing is not None and not same_function(existing, fn):
            raise ValueError(
                f"Advantage estimator {key!r} is already registered to {_qualname(existing)}; "
                f"refusing to replace it with {_qualname(fn)}"
            )
        registry[key] = fn
        return fn

    return decorator


def lookup_in(registry: MutableMapping[str, AdvEstimatorFn], name: str | Enum) -> AdvEstimatorFn:
    """``registry[name]``; an unknown name raises ValueError listing the registered ones (case-sensitive)."""
    key = estimator_name(name)
    if key not in registry:
        raise ValueError(
            f"Unknown advantage estimator simply: {key} (algorithm.adv_estimator); registered: {sorted(registry)}"
        )
    return registry[key]


def _qualname(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def register_adv_est(name: str | Enum) -> Callable[[AdvEstimatorFn], AdvEstimatorFn]:
    """Decorator registering an advantage estimator under ``name`` (a string or an enum member)."""
    return registering_into(ADV_ESTIMATOR_REGISTRY, name)


def get_adv_estimator_fn(name: str | Enum) -> AdvEstimatorFn:
    """Return the estimator registered under ``name``; unknown names list the registered ones."""
    return lookup_in(ADV_ESTIMATOR_REGISTRY, name)


# ----------------------------------------------------------------------------- helpers


def _check_shapes(estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> None:
    if token_level_rewards.dim() != 2:
        shape = tuple(token_level_rewards.shape)
        raise ValueError(f"{estimator}: token_level_rewards must be [N, R], got shape {shape}")
    if response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"{estimator}: response_mask shape {tuple(response_mask.shape)} does not match "
            f"token_level_rewards shape {tuple(token_level_rewards.shape)}"
        )


def _group_ids(estimator: str, index: Sequence | np.ndarray | None, n: int, device: torch.device) -> torch.Tensor:
    """Map prompt group ids (any hashable, e.g. uid strings) to dense integers 0..G-1."""
    if index is None:
        raise ValueError(f"{estimator} needs `index`, the prompt group id of each row (data.non_tensor_batch['uid'])")
    keys = index.tolist() if isinstance(index, np.ndarray) else list(index)
    if len(keys) != n:
        raise ValueError(f"{estimator}: index has {len(keys)} entries but the batch has {n} rows")
    lookup: dict[Any, int] = {}
    dense = [lookup.setdefault(key, len(lookup)) for key in keys]
    return torch.tensor(dense, dtype=torch.long, device=device)


def _group_stats(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group mean, unbiased group std (1 for singleton groups) and group size."""
    n_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    counts = torch.bincount(ids, minlength=n_groups).to(scores.dtype)
    sums = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, ids, scores)
    means = sums / counts
    sq_dev = torch.zeros_like(sums).index_add_(0, ids, (scores - means[ids]) ** 2)
    stds = torch.where(counts > 1, torch.sqrt(sq_dev / (counts - 1).clamp(min=1)), torch.ones_like(sums))
    return means[ids], stds[ids], counts[ids]


# ----------------------------------------------------------------------------- estimators


@register_adv_est(AdvantageEstimator.GAE)
@torch.no_grad()
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor | None,
    response_mask: torch.Tensor,
    gamma: float | None = None,
    lam: float | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the response tokens.

    Masked positions are skipped, not treated as episode ends: the value and running GAE of
    the next unmasked token carry through them, so tokens inserted by tools inside a
    multi-turn response do not cut the credit path. Returns are ``advantages + values``
    (before whitening); advantages are then whitened over the mask.
    """
    _check_shapes("gae", token_level_rewards, response_mask)
    if values is None:
        raise ValueError("gae needs `values` from the critic (data.batch['values'])")
    if values.shape != token_level_rewards.shape:
        raise ValueError(
            f"gae: values shape {tuple(values.shape)} != token_level_rewards shape {tuple(token_level_rewards.shape)}"
        )
    if gamma is None or lam is None:
        config = as_algo_config(config)
        gamma = config.gamma if gamma is None else gamma
        lam = config.lam if lam is None else lam
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    running = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        step = delta + gamma * lam * running
        keep = mask[:, t]
        running = keep * step + (1 - keep) * running
        next_value = keep * values[:, t] + (1 - keep) * next_value
        advantages[:, t] = running
    returns = (advantages + values) * mask
    advantages = masked_whiten(advantages, mask) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: outcome score minus its group mean, divided by the group std unless disabled.

    ``norm_adv_by_std_in_grpo=False`` is Dr.GRPO (no std division, which would upweight
    prompts that are nearly always solved or failed). When not given, the flag is read from
    ``config.norm_adv_by_std_in_grpo``. Singleton groups get 0.
    """
    _check_shapes("grpo", token_level_rewards, response_mask)
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = as_algo_config(config).norm_adv_by_std_in_grpo
    scores = token_level_rewards.sum(dim=-1)
    ids = _group_ids("grpo", index, scores.shape[0], scores.device)
    mean, std, _ = _group_stats(scores, ids)
    adv = scores - mean
    if norm_adv_by_std_in_grpo:
        adv = adv / (std + epsilon)
    adv = adv.unsqueeze(-1) * response_mask.to(adv.dtype)
    return adv, adv


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO: only the best response of each group is reinforced.

    Its advantage is (best score - second best score), divided by the group std when
    normalisation is on; every other response gets 0. Ties for the best give 0. A group
    needs at least two responses, so singleton groups raise.
    """
    _check_shapes("grpo_passk", token_level_rewards, response_mask)
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = as_algo_config(config).norm_adv_by_std_in_grpo
    scores = token_level_rewards.sum(dim=-1)
    ids = _group_ids("grpo_passk", index, scores.shape[0], scores.device)
    _, std, counts = _group_stats(scores, ids)
    if bool((counts < 2).any()):
        lone = int(torch.nonzero(counts < 2)[0].item())
        assert index is not None  # _group_ids raised otherwise
        uid = index[lone]
        raise ValueError(
            f"grpo_passk needs at least 2 responses per prompt (rollout.n >= 2); group {uid!r} has only one"
        )
    adv = torch.zeros_like(scores)
    for group in torch.unique(ids):
        rows = torch.nonzero(ids == group).squeeze(-1)
        top2 = torch.topk(scores[rows], k=2)
        best = rows[top2.indices[0]]
        gap = top2.values[0] - top2.values[1]
        adv[best] = gap / (std[best] + epsilon) if norm_adv_by_std_in_grpo else gap
    adv = adv.unsqueeze(-1) * response_mask.to(adv.dtype)
    return adv, adv


@register_adv_est(AdvantageEstimator.RLOO)
@torch.no_grad()
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: score minus the mean score of the *other* responses to the same prompt (0 for singletons)."""
    _check_shapes("rloo", token_level_rewards, response_mask)
    scores = token_level_rewards.sum(dim=-1)
    ids = _group_ids("rloo", index, scores.shape[0], scores.device)
    mean, _, counts = _group_stats(scores, ids)
    # s - (sum - s) / (n - 1) == n / (n - 1) * (s - mean); singletons: s - mean == 0.
    scale = torch.where(counts > 1, counts / (counts - 1).clamp(min=1), torch.ones_like(counts))
    adv = (scale * (scores - mean)).unsqueeze(-1) * response_mask.to(scores.dtype)
    return adv, adv


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    gamma: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go per token, whitened over the whole batch.

    Masked positions (tool output inside a multi-turn response, padding) are skipped: the
    running return carries through them undiscounted, and they get 0. ``gamma`` defaults to
    ``config.gamma``.
    """
    _check_shapes("reinforce_plus_plus", token_level_rewards, response_mask)
    gamma = as_algo_config(config).gamma if gamma is None else gamma
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        keep = mask[:, t]
        running = keep * (token_level_rewards[:, t] + gamma * running) + (1 - keep) * running
        returns[:, t] = running * keep
    advantages = masked_whiten(returns, mask) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline: (score - group mean) broadcast to tokens, whitened over the batch."""
    _check_shapes("reinforce_plus_plus_baseline", token_level_rewards, response_mask)
    scores = token_level_rewards.sum(dim=-1)
    ids = _group_ids("reinforce_plus_plus_baseline", index, scores.shape[0], scores.device)
    mean, _, _ = _group_stats(scores, ids)
    mask = response_mask.to(scores.dtype)
    centred = (scores - mean).unsqueeze(-1) * mask
    advantages = masked_whiten(centred, mask) * mask
    return advantages, advantages


@register_adv_est(AdvantageEstimator.REMAX)
@torch.no_grad()
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: undiscounted return-to-go minus the reward of the greedy response (``reward_baselines`` [N])."""
    if response_mask is None:
        raise ValueError("remax needs `response_mask` (data.batch['response_mask'])")
    _check_shapes("remax", token_level_rewards, response_mask)
    if reward_baselines is None:
        raise ValueError(
            "remax needs `reward_baselines`, the greedy-response reward per row (data.batch['reward_baselines'])"
        )
    if reward_baselines.shape != token_level_rewards.shape[:1]:
        raise ValueError(
            f"remax: reward_baselines must have shape [N]={tuple(token_level_rewards.shape[:1])}, "
            f"got {tuple(reward_baselines.shape)}"
        )
    mask = response_mask.to(token_level_rewards.dtype)
    masked_rewards = token_level_rewards * mask
    returns = masked_rewards.flip(-1).cumsum(-1).flip(-1) * mask
    advantages = returns - reward_baselines.to(returns.dtype).unsqueeze(-1) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.OPO)
@torch.no_grad()
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: score minus the length-weighted group mean sum(len*score)/sum(len), the optimal baseline.

    A group whose responses are all empty falls back to the plain mean.
    """
    _check_shapes("opo", token_level_rewards, response_mask)
    scores = token_level_rewards.sum(dim=-1)
    ids = _group_ids("opo", index, scores.shape[0], scores.device)
    lengths = response_mask.to(scores.dtype).sum(dim=-1)
    n_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    weighted = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, ids, lengths * scores)
    total_len = torch.zeros_like(weighted).index_add_(0, ids, lengths)
    plain_mean, _, _ = _group_stats(scores, ids)
    baseline = torch.where(total_len[ids] > 0, weighted[ids] / total_len[ids].clamp(min=1e-8), plain_mean)
    adv = (scores - baseline).unsqueeze(-1) * response_mask.to(scores.dtype)
    return adv, adv


# The group statistics above are already computed in one pass of scatter-adds.
compute_grpo_vectorized_outcome_advantage = register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)(
    compute_grpo_outcome_advantage
)
compute_rloo_vectorized_outcome_advantage = register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)(
    compute_rloo_outcome_advantage
)


@register_adv_est(AdvantageEstimator.GPG)
@torch.no_grad()
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG: (score - group mean) * alpha / f_norm, with alpha = batch size / number of non-zero scores.

    Scaling by the inverse fraction of rewarded responses keeps the gradient's size when most
    responses score 0 (their centred advantages would otherwise be tiny). The ``alpha`` argument
    is accepted for verl compatibility and replaced by that batch statistic.
    """
    del alpha
    _check_shapes("gpg", token_level_rewards, response_mask)
    if f_norm == 0:
        raise ValueError("gpg: f_norm must be non-zero")
    scores = token_level_rewards.sum(dim=-1)
    ids = _group_ids("gpg", index, scores.shape[0], scores.device)
    mean, _, _ = _group_stats(scores, ids)
    alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1).to(scores.dtype)
    adv = (alpha * (scores - mean) / f_norm).unsqueeze(-1) * response_mask.to(scores.dtype)
    return adv, adv
