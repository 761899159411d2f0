"""Per-group statistics for group-relative advantages (GRPO-style), on torch tensors.

Rows of a batch belong to prompt groups identified by arbitrary labels (uid strings, ints, floats). Recipes turn
the labels into dense group indices with :func:`as_torch_index` and reduce scores per group with
:func:`group_mean_std`, without a Python loop over groups.

Device: an explicit ``device`` argument wins, then the ``VERL_FORCE_DEVICE`` environment variable, then the device
of the tensor given, else CPU (verl picks the accelerator; here data stays where the caller keeps it).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

__all__ = ["as_torch_index", "group_mean_std"]

_NEAR_INT = 1e-6


def _device(explicit: torch.device | str | None, like: Any = None) -> torch.device:
    if explicit is not None:
        return torch.device(explicit)
    forced = os.environ.get("VERL_FORCE_DEVICE")
    if forced:
        return torch.device(forced)
    return like.device if isinstance(like, torch.Tensor) else torch.device("cpu")


def _flat_labels(index: Any) -> np.ndarray:
    if isinstance(index, torch.Tensor):
        return index.detach().reshape(-1).cpu().numpy()
    try:
        array = np.asarray(index)
    except (ValueError, TypeError):  # ragged or odd items: keep them as opaque objects
        array = np.empty(len(index), dtype=object)
        array[:] = list(index)
    return array.reshape(-1)


def _as_integers(labels: np.ndarray) -> np.ndarray | None:
    """The labels as int64 when they already are integers (bools, near-integer floats, numeric strings)."""
    if labels.dtype.kind in "biu":
        return labels.astype(np.int64)
    if labels.dtype.kind == "f":
        rounded = np.rint(labels.astype(np.float64))
        return rounded.astype(np.int64) if np.allclose(labels, rounded, rtol=0.0, atol=_NEAR_INT) else None
    try:
        return labels.astype(np.int64)
    except (ValueError, TypeError, OverflowError):
        return None


def as_torch_index(index: Any, device: torch.device | str | None = None) -> torch.Tensor:
    """Group labels as a 1-D ``torch.long`` tensor.

    Integer-valued labels (ints, bools, floats within 1e-6 of an integer, numeric strings) are kept as their
    integer values; any other labels (uuids, mixed types) are factorised to ``0..G-1`` in sorted label order.
    """
    labels = _flat_labels(index)
    target = _device(device, index)
    integers = _as_integers(labels)
    if integers is None:
        try:
            _, inverse = np.unique(labels, return_inverse=True)
        except TypeError:  # labels of mutually incomparable types: compare their text
            _, inverse = np.unique(np.array([str(v) for v in labels], dtype=object), return_inverse=True)
        integers = inverse.reshape(-1).astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(integers)).to(target)


@torch.no_grad()
def group_mean_std(
    scores: torch.Tensor, gidx: torch.Tensor, eps: float = 1e-6, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group ``(mean, std, count)``, each of shape ``(G,)`` float32 with ``G = max(gidx) + 1``.

    ``std`` is the unbiased standard deviation, its variance floored at ``eps``. Groups with one member (or none)
    get mean 0 and std 1, so that ``(score - mean) / std`` leaves a lone sample's score unchanged, as verl does.
    """
    target = _device(device, scores)
    values = scores.reshape(-1).to(device=target, dtype=torch.float32)
    groups = gidx.reshape(-1).to(device=target, dtype=torch.long)
    if values.numel() != groups.numel():
        raise ValueError(f"group_mean_std: {values.numel()} scores but {groups.numel()} group indices")
    if groups.numel() and int(groups.min()) < 0:
        raise ValueError(f"group_mean_std: group indices must be >= 0, got {int(groups.min())}")
    n_groups = int(groups.max()) + 1 if groups.numel() else 0
    zeros = torch.zeros(n_groups, device=target, dtype=torch.float32)
    count = zeros.index_add(0, groups, torch.ones_like(values))
    mean = zeros.index_add(0, groups, values) / count.clamp_min(1.0)
    squares = zeros.index_add(0, groups, (values - mean[groups]) ** 2)
    std = torch.sqrt((squares / (count - 1.0).clamp_min(1.0)).clamp_min(eps))
    lone = count <= 1.0
    mean = torch.where(lone, torch.zeros_like(mean), mean)
    std = torch.where(lone, torch.ones_like(std), std)
    return mean, std, count
