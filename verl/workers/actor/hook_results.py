"""Check what the overridable hooks of the actor and the critic hand back, naming the hook on a mismatch.

Recipes subclass ``DataParallelPPOActor`` / ``DataParallelPPOCritic`` and override ``_forward_micro_batch`` and
``_optimizer_step``; the update and scoring loops call those hooks and use their results. A result the loops cannot
use (a wrong shape, a swapped pair, a missing entropy) fails here with the class and hook named, instead of training
on it or failing deep inside a loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict

__all__ = [
    "build_outputs",
    "describe",
    "grad_norm_value",
    "hook_name",
    "model_inputs",
    "policy_outputs",
    "value_outputs",
]


def hook_name(owner: object, hook: str) -> str:
    """``Class._hook`` of the instance whose hook ran (the recipe's subclass, when it has one)."""
    return f"{type(owner).__name__}.{hook}"


def describe(value: Any) -> str:
    """A short account of ``value`` for error messages: type, and shape or length."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items ({', '.join(type(v).__name__ for v in value)})"
    if isinstance(value, Mapping):
        return f"a mapping with keys {sorted(map(str, value))}"
    return f"{type(value).__name__} {value!r}"[:200]


def model_inputs(micro: TensorDict) -> dict[str, torch.Tensor]:
    """A micro-batch as the hooks receive it: a plain dict of its tensors (verl passes ``{**batch}``), so an
    override may read, add or pop keys without touching the loop's own batch."""
    return {key: micro[key] for key in micro.keys()}


def _check_per_token(value: Any, expected: tuple[int, ...], what: str, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where} returned {describe(value)} as {what}; expected a tensor of shape {expected}")
    if tuple(value.shape) != expected:
        raise ValueError(
            f"{where} returned {what} of shape {tuple(value.shape)}; expected [batch, response_length] = {expected}"
        )
    return value


def policy_outputs(
    result: Any, expected: tuple[int, ...], need_entropy: bool, where: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_prob, entropy)`` from what ``_forward_micro_batch`` returned.

    Accepted: verl's pair ``(entropy, log_prob)`` (entropy ``None`` when not computed), or the mapping of later verl
    releases ``{"log_probs": ..., "entropys": ...}``. Both tensors are ``[batch, response_length]``; the entropy is
    required when ``need_entropy``.
    """
    if isinstance(result, Mapping):
        if "log_probs" not in result:
            raise TypeError(f"{where} returned {describe(result)}; a mapping result needs 'log_probs' (and 'entropys')")
        log_prob, entropy = result["log_probs"], result.get("entropys")
    elif isinstance(result, tuple | list) and len(result) == 2:
        entropy, log_prob = result
    else:
        raise TypeError(
            f"{where} returned {describe(result)}; it must return (entropy, log_prob), entropy None when "
            "calculate_entropy is false"
        )
    log_prob = _check_per_token(log_prob, expected, "log_prob", where)
    if entropy is None:
        if need_entropy:
            raise ValueError(f"{where} returned no entropy (None) where calculate_entropy=True needs one")
        return log_prob, None
    return log_prob, _check_per_token(entropy, expected, "entropy", where)


def value_outputs(result: Any, expected: tuple[int, ...], where: str) -> torch.Tensor:
    """The ``[batch, response_length]`` values ``_forward_micro_batch`` of a critic returned."""
    return _check_per_token(result, expected, "values", where)


def grad_norm_value(result: Any, where: str) -> float:
    """The gradient norm ``_optimizer_step`` returned (a number or a one-element tensor, sharded or not)."""
    if isinstance(result, torch.Tensor):
        if result.numel() != 1:
            raise ValueError(f"{where} returned {describe(result)}; it must return the gradient norm (one number)")
        full_tensor = getattr(result, "full_tensor", None)
        return float((full_tensor() if callable(full_tensor) else result).detach().float().item())
    if isinstance(result, int | float) and not isinstance(result, bool):
        return float(result)
    raise TypeError(f"{where} returned {describe(result)}; it must return the gradient norm (a tensor or a float)")


def build_outputs(result: Any, names: tuple[str, ...], trains: bool, role: str, where: str) -> tuple[Any, ...]:
    """What a worker's ``_build_*_model_optimizer`` returned, checked: a tuple of ``names`` whose first item is the
    module and, when ``trains`` (the ``role`` is updated), whose optimizer and lr_scheduler can step."""
    if not isinstance(result, tuple | list) or len(result) != len(names):
        raise TypeError(f"{where} returned {describe(result)}; it must return ({', '.join(names)})")
    module, optimizer, lr_scheduler = result[:3]
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{where} returned {describe(module)} as the module; expected a torch.nn.Module")
    if trains:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"{where} returned {describe(optimizer)} as the optimizer; the {role} needs one")
        if not (callable(getattr(lr_scheduler, "step", None)) and callable(getattr(lr_scheduler, "state_dict", None))):
            raise TypeError(
                f"{where} returned {describe(lr_scheduler)} as the lr_scheduler; the {role} steps it once per update "
                "and checkpoints it (it needs step() and state_dict())"
            )
    return tuple(result)
