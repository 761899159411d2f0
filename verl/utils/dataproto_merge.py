"""How the parts of two DataProtos combine: structural equality, union without clashes, and the concat rule
for ``meta_info``. Kept apart from :mod:`verl.protocol` so the rules are readable (and testable) on their own.

Clashes raise :class:`~verl.utils.protocol_errors.DataProtoError` (a ``ValueError`` and an ``AssertionError``,
the latter being what upstream verl raises) naming the key.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.utils.protocol_errors import DataProtoError

__all__ = ["merge_meta_info", "union_meta_info", "union_numpy_dict", "union_tensor_dict", "values_equal"]


def _tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    if a.is_nested or b.is_nested:
        if not (a.is_nested and b.is_nested) or a.dtype != b.dtype:
            return False
        rows_a, rows_b = a.unbind(0), b.unbind(0)
        return len(rows_a) == len(rows_b) and all(_tensors_equal(x, y) for x, y in zip(rows_a, rows_b))
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    b = b.to(a.device)
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def _both_nan(a: Any, b: Any) -> bool:
    return (
        isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)) and math.isnan(a) and math.isnan(b)
    )


def values_equal(a: Any, b: Any) -> bool:
    """Structural equality for meta_info values and object-array rows (tensors, arrays, containers).

    NaN equals NaN (a copied reward array must not clash with itself), and self-referencing containers compare
    without recursing forever (a pair already being compared further up counts as equal).
    """
    return _equal(a, b, set())


def _equal(a: Any, b: Any, active: set[tuple[int, int]]) -> bool:
    if a is b or _both_nan(a, b):
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _tensors_equal(a, b)
    is_container = isinstance(a, (np.ndarray, dict, list, tuple))
    pair = (id(a), id(b))
    if is_container and pair in active:
        return True
    if is_container:
        active.add(pair)
    try:
        return _compare(a, b, active)
    finally:
        active.discard(pair)


def _compare(a: Any, b: Any, active: set[tuple[int, int]]) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype == object or b.dtype == object:
            return all(_equal(x, y, active) for x, y in zip(a.ravel(), b.ravel()))
        nan_aware = a.dtype.kind in "fc" and b.dtype.kind in "fc"
        return bool(np.array_equal(a, b, equal_nan=nan_aware))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], active) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y, active) for x, y in zip(a, b))
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
    DataProtoError naming it); ``metrics`` is special: its dicts merge into one ``dict[str, list]`` in part order
    (scalar values are appended, list values extended, so nested concats stay flat)."""
    merged: dict[str, Any] = {}
    for part, meta in enumerate(metas):
        for key, value in meta.items():
            if key == "metrics":
                _append_metrics(merged.setdefault("metrics", {}), value)
            elif key not in merged:
                merged[key] = value
            elif not values_equal(merged[key], value):
                raise DataProtoError(
                    f"cannot concat: Conflicting values for meta_info key {key!r}: meta_info[{key!r}] differs "
                    f"between parts ({reprlib.repr(merged[key])} vs {reprlib.repr(value)} in part {part})"
                )
    return merged


def _clash(part: str, key: Any) -> DataProtoError:
    # The backquoted clause is the wording upstream verl's callers match on.
    return DataProtoError(
        f"union conflict: {part} key {key!r} holds different values on the two sides "
        f"(`{key}` in tensor_dict1 and tensor_dict2 are not the same object.)"
    )


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the keys of ``tensor_dict2`` to ``tensor_dict1`` in place and return it.

    A key both hold must hold equal tensors, else DataProtoError naming it; every key is checked before anything
    is added, so a clash leaves ``tensor_dict1`` unchanged.
    """
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(
            f"cannot union tensor batches of batch_size {list(tensor_dict1.batch_size)} "
            f"and {list(tensor_dict2.batch_size)}"
        )
    existing = set(tensor_dict1.keys(include_nested=True, leaves_only=True))
    added = {}
    for key, value in tensor_dict2.items(include_nested=True, leaves_only=True):
        if key not in existing:
            added[key] = value
        elif not values_equal(tensor_dict1.get(key), value):
            raise _clash("batch", key)
    for key, value in added.items():
        tensor_dict1.set(key, value)
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the arrays of ``tensor_dict2`` to ``tensor_dict1`` in place and return it.

    A key both hold must hold equal arrays (NaN equals NaN, object rows compared structurally), else
    DataProtoError naming it; a clash leaves ``tensor_dict1`` unchanged.
    """
    for key, value in tensor_dict2.items():
        if key in tensor_dict1 and not values_equal(tensor_dict1[key], value):
            raise _clash("non_tensor_batch", key)
    for key, value in tensor_dict2.items():
        tensor_dict1.setdefault(key, value)
    return tensor_dict1


def union_meta_info(a: dict, b: dict) -> dict:
    """A new dict with the keys of both; a shared key must hold equal values (else DataProtoError naming it)."""
    out = dict(a)
    for key, value in b.items():
        if key in out and not values_equal(out[key], value):
            raise DataProtoError(f"union conflict: meta_info key {key!r} holds different values on the two sides")
        out.setdefault(key, value)
    return out
