"""KL estimators, KL coefficient controllers and the in-reward KL penalty.

Estimators of KL(pi || pi_ref) from one sample's log-probs (see J. Schulman, "Approximating
KL divergence"), with d = log pi - log pi_ref:

- ``kl`` / ``k1``: d (unbiased, high variance, can be negative)
- ``abs``: |d|
- ``mse`` / ``k2``: d^2 / 2 (biased, but its gradient is the right KL gradient)
- ``low_var_kl`` / ``k3``: exp(-d) + d - 1 (unbiased, low variance, >= 0), clamped to [-10, 10]

A ``+`` suffix (``k1+``, ``k3+``, ``low_var_kl+`` ...) keeps the named estimator's value in
the forward pass but takes the gradient of k2 (straight-through), because the expected
gradients of k1 and k3 are not the gradient of the KL while k2's is.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.trainer.ppo._util import as_kl_ctrl_config
from verl.utils.torch_functional import masked_mean

__all__ = [
    "KL_PENALTY_TYPES",
    "kl_penalty",
    "kl_penalty_forward",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
    "apply_kl_penalty",
    "compute_rewards",
]

_ALIASES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
KL_PENALTY_TYPES: tuple[str, ...] = tuple(_ALIASES) + tuple(f"{name}+" for name in _ALIASES)


def _check_kl_type(kl_type: str) -> None:
    if kl_type not in KL_PENALTY_TYPES:
        raise ValueError(f"Unknown kl_penalty type {kl_type!r}; valid: {list(KL_PENALTY_TYPES)}")


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate of the named estimator (no ``+`` suffix), with its own gradient."""
    _check_kl_type(kl_penalty)
    kind = _ALIASES[kl_penalty.rstrip("+")]
    diff = logprob - ref_logprob
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff.square()
    # k3: exp(-d) + d - 1, computed on a clamped log-ratio so exp() cannot overflow.
    neg = torch.clamp(-diff, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(neg) - neg - 1.0, min=-10.0, max=10.0)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str = "kl") -> torch.Tensor:
    """Per-token KL estimate; a ``+`` suffix swaps in the k2 gradient (straight-through)."""
    return _kl_estimate(logprob, ref_logprob, kl_penalty)


def _kl_estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_type: str) -> torch.Tensor:
    _check_kl_type(kl_type)
    value = kl_penalty_forward(logprob, ref_logprob, kl_type.rstrip("+"))
    if not kl_type.endswith("+") or _ALIASES[kl_type[:-1]] == "k2":
        return value
    grad_carrier = 0.5 * (logprob - ref_logprob).square()
    return grad_carrier - grad_carrier.detach() + value.detach()


class FixedKLController:
    """Constant KL coefficient."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient stays fixed."""


class AdaptiveKLController:
    """KL coefficient steered towards ``target_kl`` (Ziegler et al. 2019).

    Each update multiplies the coefficient by 1 + clip(kl/target - 1, -0.2, 0.2) * n_steps / horizon,
    so it moves at most 20% per horizon's worth of samples.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if target_kl <= 0:
            raise ValueError(f"algorithm.kl_ctrl.target_kl must be > 0 for the adaptive controller, got {target_kl}")
        if horizon <= 0:
            raise ValueError(f"algorithm.kl_ctrl.horizon must be > 0 for the adaptive controller, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller described by ``algorithm.kl_ctrl`` (type fixed|adaptive, kl_coef, horizon, target_kl)."""
    kl_ctrl = as_kl_ctrl_config(kl_ctrl)
    kind = kl_ctrl.type
    if kind == "fixed":
        return FixedKLController(kl_coef=kl_ctrl.kl_coef)
    if kind == "adaptive":
        return AdaptiveKLController(init_kl_coef=kl_ctrl.kl_coef, target_kl=kl_ctrl.target_kl, horizon=kl_ctrl.horizon)
    raise ValueError(f"Unknown algorithm.kl_ctrl.type {kind!r}; valid: ['fixed', 'adaptive']")


def apply_kl_penalty(data: Any, kl_ctrl: FixedKLController | AdaptiveKLController, kl_penalty: str = "kl"):
    """Fold the KL to the reference policy into the reward: rewards = scores - beta * KL per token.

    Reads ``old_log_probs``, ``ref_log_prob``, ``token_level_scores``, ``response_mask`` from
    ``data.batch``, writes ``token_level_rewards``, then updates the controller with the batch's
    mean per-sequence KL. Returns ``(data, metrics)``.
    """
    keys = set(data.batch.keys())
    for key in ("old_log_probs", "ref_log_prob", "token_level_scores", "response_mask"):
        if key not in keys:
            raise KeyError(f"apply_kl_penalty needs data.batch[{key!r}]; present keys: {sorted(keys)}")
    mask = data.batch["response_mask"]
    scores = data.batch["token_level_scores"]
    kld = _kl_estimate(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty) * mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = scores - beta * kld
    current_kl = float(torch.mean(masked_mean(kld, mask, axis=-1)).item())
    kl_ctrl.update(current_kl=current_kl, n_steps=int(scores.shape[0]))
    metrics = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
    return data, metrics


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float
) -> torch.Tensor:
    """Per-token rewards with the k1 KL penalty folded in: ``scores - kl_ratio * (log pi_old - log pi_ref)``.

    The stateless form of :func:`apply_kl_penalty` (fixed coefficient, k1 estimator, no mask), for callers that
    hold the tensors rather than a DataProto.
    """
    return token_level_scores - kl_ratio * (old_log_prob - ref_log_prob)
