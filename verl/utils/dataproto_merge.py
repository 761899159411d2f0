"""How the parts of two DataProtos combine: structural equality, union without clashes, and the concat rule
for ``meta_info``. Kept apart from :mod:`verl.protocol` so the rules are readable (and testable) on their own."""

from __future__ import annotations

import reprlib
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["merge_meta_info", "union_meta_info", "union_numpy_dict", "union_tensor_dict", "values_equal"]


def _tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    b = b.to(a.device)
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def values_equal(a: Any, b: Any) -> bool:
    """Structural equality for meta_info values and object-array rows (tensors, arrays, containers)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _tensors_equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype == object or b.dtype == object:
            return all(values_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # objects whose == is ambiguous or broken are simply "not equal"
        return False


def _append_metrics(acc: dict[str, list], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, list):
        for item in value:
            _append_metrics(acc, item)
        return
    if not isinstance(value, dict):
        raise TypeError(f"meta_info['metrics'] must be a dict (or a list of dicts), got {type(value).__name__}")
    for name, metric in value.items():
        bucket = acc.setdefault(name, [])
        bucket.extend(metric) if isinstance(metric, list) else bucket.append(metric)


def merge_meta_info(metas: list[dict]) -> dict:
    """The concat rule: keys are united; a key present in several parts must hold equal values there (else
    ValueError naming it); ``metrics`` is special: its dicts merge into one ``dict[str, list]`` in part order
    (scalar values are appended, list values extended, so nested concats stay flat)."""
    merged: dict[str, Any] = {}
    for part, meta in enumerate(metas):
        for key, value in meta.items():
            if key == "metrics":
                _append_metrics(merged.setdefault("metrics", {}), value)
            elif key not in merged:
                merged[key] = value
            elif not values_equal(merged[key], value):
                raise ValueError(
                    f"cannot concat: meta_info[{key!r}] differs between parts "
                    f"({reprlib.repr(merged[key])} vs {reprlib.repr(value)} in part {part})"
                )
    return merged


def union_tensor_dict(a: TensorDict, b: TensorDict) -> TensorDict:
    """A new TensorDict with the keys of both; a shared key must hold equal tensors (else ValueError naming it)."""
    if a.batch_size != b.batch_size:
        raise ValueError(f"cannot union tensor batches of batch_size {list(a.batch_size)} and {list(b.batch_size)}")
    out = a.copy()
    existing = set(a.keys(include_nested=True, leaves_only=True))
    for key, value in b.items(include_nested=True, leaves_only=True):
        if key in existing:
            if not values_equal(a.get(key), value):
                raise ValueError(f"union conflict: batch key {key!r} holds different values in the two DataProtos")
        else:
            out.set(key, value)
    return out


def union_numpy_dict(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A new dict with the keys of both; a shared key must hold equal arrays (else ValueError naming it)."""
    out = dict(a)
    for key, value in b.items():
        if key in out and not values_equal(out[key], value):
            raise ValueError(
                f"union conflict: non_tensor_batch key {key!r} holds different values in the two DataProtos"
            )
        out.setdefault(key, value)
    return out


def union_meta_info(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        if key in out and not values_equal(out[key], value):
            raise ValueError(f"union conflict: meta_info key {key!r} holds different values in the two DataProtos")
        out.setdefault(key, value)
    return out
