"""Plain TensorDicts as a batch container: per-row tensors, per-row Python objects and batch-wide values in one.

A TensorDict built by :func:`get_tensordict` holds three kinds of entries under one batch dimension:

- tensors (dense, or jagged nested tensors for unpadded sequences, see :mod:`verl.utils.nested_tensors`);
- per-row Python objects (strings, dicts, lists of any length) as a ``NonTensorStack``, one item per row;
- batch-wide values (a config, a step number) as one wrapped value that every row shares.

Batch-wide values use tensordict's ``MetaData`` where it exists (tensordict >= 0.15): concatenating batches
keeps the first part's value, as it did for ``NonTensorData`` in older tensordict releases, instead of
turning the value into a per-row stack. Readers should go through :func:`get` / :func:`pop`, which unwrap
every kind (tensor as is, stack as a list, batch-wide value as the value).

Contract violations raise :class:`~verl.utils.protocol_errors.DataProtoError` (a ``ValueError`` and an
``AssertionError``) naming the key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import tensordict
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.tensorclass import NonTensorData, NonTensorStack

from verl.utils.dataproto_merge import values_equal
from verl.utils.nested_tensors import (
    concat_nested_tensors,
    nested_rows,
    nested_tensor_from_tensor_list,
    ragged_idx,
    select_nested_rows,
)
from verl.utils.protocol_errors import DataProtoError

__all__ = [
    "assert_tensordict_eq",
    "assign_non_tensor",
    "assign_non_tensor_data",
    "assign_non_tensor_stack",
    "chunk_tensordict",
    "concat_nested_tensors",
    "concat_tensordict",
    "concat_tensordict_with_none_bsz",
    "contiguous",
    "get",
    "get_keys",
    "get_non_tensor_data",
    "get_tensordict",
    "index_select_tensor_dict",
    "is_batch_wide",
    "list_of_dict_to_tensordict",
    "make_iterator",
    "maybe_fix_3d_position_ids",
    "nested_tensor_from_tensor_list",
    "pad_to_divisor",
    "pop",
    "pop_keys",
    "union_tensor_dict",
    "unpad",
    "unwrap_non_tensor_data",
]

logger = logging.getLogger(__name__)

_MetaData = getattr(tensordict, "MetaData", None)
_BATCH_WIDE_TYPES: tuple[type, ...] = (NonTensorData,) if _MetaData is None else (NonTensorData, _MetaData)


# ------------------------------------------------------------------------------------------------- wrapping


def is_batch_wide(entry: Any) -> bool:
    """True for a wrapped batch-wide value (``MetaData`` or ``NonTensorData``), as returned by ``td.get(key)``."""
    return isinstance(entry, _BATCH_WIDE_TYPES)


def _batch_wide(value: Any) -> Any:
    if is_batch_wide(value):
        value = value.data
    return (_MetaData or NonTensorData)(value)


def _row_stack(key: str, values: list | np.ndarray) -> NonTensorStack:
    for i, item in enumerate(values):
        if isinstance(item, torch.Tensor):
            raise TypeError(
                f"{key!r}[{i}] is a torch.Tensor: a list becomes per-row Python objects; "
                "pass a tensor (or a jagged nested tensor) for tensor data, or convert the items to numpy"
            )
    return NonTensorStack.from_list([NonTensorData(item) for item in values])


def _plain(entry: Any) -> Any:
    """What a reader sees: tensors as is, per-row stacks as a list, batch-wide values unwrapped."""
    if isinstance(entry, NonTensorStack):
        return entry.tolist()
    if is_batch_wide(entry):
        return entry.data
    return entry


def _require_tensordict(value: Any, what: str) -> None:
    if not isinstance(value, TensorDictBase):
        raise TypeError(f"{what} needs a TensorDict, got {type(value).__name__}")


def assign_non_tensor_data(tensor_dict: TensorDict, key: str, val: Any) -> None:
    """Store ``val`` under ``key`` as one batch-wide value."""
    _require_tensordict(tensor_dict, "assign_non_tensor_data")
    tensor_dict[key] = _batch_wide(val)


def assign_non_tensor_stack(tensor_dict: TensorDict, key: str, val: list) -> None:
    """Store ``val`` (one Python object per row: nested lists, dicts, ...) under ``key`` as a per-row stack."""
    _require_tensordict(tensor_dict, "assign_non_tensor_stack")
    _set_stack(tensor_dict, key, _row_stack(key, val))


def _set_stack(tensor_dict: TensorDict, key: str, stack: NonTensorStack) -> None:
    rows = tensor_dict.batch_size[0] if tensor_dict.batch_dims else None
    if rows is not None and len(stack) != rows:
        raise RuntimeError(f"per-row entry {key!r} has {len(stack)} rows but the tensordict has {rows}")
    tensor_dict[key] = stack


def assign_non_tensor(tensor_dict: TensorDict, **kwargs: Any) -> TensorDict:
    """Store each keyword: lists become per-row stacks, wrapped entries are kept, anything else is batch-wide."""
    _require_tensordict(tensor_dict, "assign_non_tensor")
    for key, val in kwargs.items():
        if isinstance(val, NonTensorStack):
            _set_stack(tensor_dict, key, val)
        elif is_batch_wide(val):
            tensor_dict[key] = val
        elif isinstance(val, list):
            assign_non_tensor_stack(tensor_dict, key, val)
        else:
            assign_non_tensor_data(tensor_dict, key, val)
    return tensor_dict


def unwrap_non_tensor_data(data: Any) -> Any:
    """The value inside a batch-wide wrapper; anything else is returned unchanged."""
    return data.data if is_batch_wide(data) else data


def get_non_tensor_data(data: TensorDict, key: str, default: Any) -> Any:
    """``data.get(key, default)`` with a batch-wide wrapper unwrapped."""
    return unwrap_non_tensor_data(data.get(key, default))


# --------------------------------------------------------------------------------------------- construction


def get_tensordict(
    tensor_dict: dict[str, torch.Tensor | list | np.ndarray | NonTensorStack],
    non_tensor_dict: dict[str, Any] | None = None,
) -> TensorDict:
    """Build a batch: ``tensor_dict`` holds per-row entries (tensors, or lists / arrays of Python objects, one
    per row), ``non_tensor_dict`` batch-wide values. Every per-row entry must have the same number of rows;
    without any, the batch size is ``[]``."""
    source: dict[str, Any] = {}
    rows, ref = None, None
    for key, value in tensor_dict.items():
        if isinstance(value, torch.Tensor):
            if value.is_nested and (value.layout != torch.jagged or not value.is_contiguous()):
                raise DataProtoError(
                    f"nested tensor {key!r} must be jagged and contiguous (build it with layout=torch.jagged)"
                )
            if value.dim() == 0:
                raise DataProtoError(f"tensor {key!r} is a scalar; per-row tensors need a leading batch dimension")
            entry, count = value, value.size(0)
        elif isinstance(value, NonTensorStack):
            entry, count = value, len(value)
        elif isinstance(value, (list, np.ndarray)):
            entry, count = _row_stack(key, value), len(value)
        else:
            raise TypeError(
                f"per-row entry {key!r} must be a torch.Tensor, list, numpy array or NonTensorStack, "
                f"got {type(value).__name__}; put batch-wide values in non_tensor_dict"
            )
        if rows is None:
            rows, ref = count, key
        elif count != rows:
            raise DataProtoError(f"per-row entry {key!r} has {count} rows but {ref!r} has {rows}")
        source[key] = entry
    for key, value in (non_tensor_dict or {}).items():
        if key in source:
            raise DataProtoError(f"key {key!r} is given both as a per-row entry and as a batch-wide value")
        source[key] = _batch_wide(value)
    return TensorDict(source, batch_size=[] if rows is None else [rows])


def list_of_dict_to_tensordict(list_of_dicts: list[dict[str, Any]]) -> TensorDict:
    """One row per dict: equal-shape tensors are stacked, ragged tensors become jagged nested tensors and
    anything else a per-row stack. Every dict must have the keys of the first."""
    if not list_of_dicts:
        raise ValueError("list_of_dict_to_tensordict needs at least one dict")
    keys = list(list_of_dicts[0])
    columns: dict[str, Any] = {}
    for key in keys:
        column = []
        for i, row in enumerate(list_of_dicts):
            if key not in row:
                raise KeyError(f"row {i} lacks key {key!r} (row 0 has {keys})")
            column.append(row[key])
        if all(isinstance(item, torch.Tensor) for item in column):
            if all(item.shape == column[0].shape for item in column):
                columns[key] = torch.stack(column)
            else:
                columns[key] = torch.nested.as_nested_tensor(column, layout=torch.jagged)
        else:
            columns[key] = NonTensorStack(*column)
    return TensorDict(columns, batch_size=[len(list_of_dicts)])


# ----------------------------------------------------------------------------------------------- access


def get(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """The entry under ``key`` as a reader wants it (tensor, list of row objects, or the batch-wide value)."""
    if key not in tensordict.keys():
        return default
    return _plain(tensordict.get(key))


def pop(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """Remove ``key`` and return it like :func:`get` (``default`` when absent)."""
    missing = object()
    entry = tensordict.pop(key, missing)
    return default if entry is missing else _plain(entry)


def _check_keys(tensordict: TensorDict, keys: Iterable[str]) -> list[str]:
    keys = list(keys)
    present = set(tensordict.keys())
    for key in keys:
        if key not in present:
            raise KeyError(f"key {key!r} not in tensordict; available: {sorted(map(str, present))}")
    return keys


def get_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """A new TensorDict with just ``keys`` (KeyError naming a missing one); entries are shared, not copied."""
    return tensordict.select(*_check_keys(tensordict, keys))


def pop_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """Remove ``keys`` from ``tensordict`` and return them as a new TensorDict; a missing key raises KeyError
    before anything is removed."""
    keys = _check_keys(tensordict, keys)
    popped = tensordict.select(*keys)
    for key in keys:
        del tensordict[key]
    return popped


# ------------------------------------------------------------------------------------------- row selection


def _index_tensor(indices: torch.Tensor | list[int] | np.ndarray) -> torch.Tensor:
    index = torch.as_tensor(indices)
    if index.dim() != 1:
        raise DataProtoError(f"indices must be 1-D, got shape {list(index.shape)}")
    if index.dtype == torch.bool:
        index = index.nonzero().view(-1)
    return index


def index_select_tensor_dict(batch: TensorDict | None, indices: torch.Tensor | list[int]) -> TensorDict | None:
    """Rows ``indices`` (ints or a boolean mask) of ``batch``, nested tensors and per-row stacks included;
    batch-wide values are kept. ``None`` passes through."""
    if batch is None:
        return None
    index = _index_tensor(indices)
    selected: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.is_nested:
            selected[key] = select_nested_rows(value, index)
        elif (value.dim() if isinstance(value, torch.Tensor) else len(value.batch_size)) > 0:
            selected[key] = value[index]
        else:  # an entry without batch dims: nothing to select
            selected[key] = value
    return TensorDict(selected, batch_size=[index.numel()], device=batch.device)


def chunk_tensordict(td: TensorDict, chunks: int) -> list[TensorDict]:
    """``chunks`` equal parts along the batch dim (DataProtoError unless the length divides), jagged nested
    tensors included, each keeping its ragged dimension."""
    _require_tensordict(td, "chunk_tensordict")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive int, got {chunks!r}")
    rows = len(td)
    if rows % chunks:
        raise DataProtoError(f"cannot chunk a tensordict of {rows} rows into {chunks} chunks of equal size")
    nested = [key for key, value in td.items() if isinstance(value, torch.Tensor) and value.is_nested]
    rest = td.exclude(*nested)
    if rows == 0:
        return [rest.clone(recurse=False) for _ in range(chunks)]
    size = rows // chunks
    parts = list(rest.split(size, dim=0))
    for key in nested:
        value = td.get(key)
        row_views = nested_rows(value)
        for i, part in enumerate(parts):
            part.set(key, nested_tensor_from_tensor_list(row_views[i * size : (i + 1) * size], ragged_idx(value)))
    return parts


def concat_tensordict_with_none_bsz(data: list[TensorDict]) -> TensorDict:
    """Concatenating batches of batch-wide values only (batch size ``[]``) keeps the first one."""
    for i, td in enumerate(data):
        if td.batch_dims:
            raise DataProtoError(f"part {i} has batch size {list(td.batch_size)}; expected [] (batch-wide values only)")
    return data[0]


def concat_tensordict(data: list[TensorDict]) -> TensorDict:
    """All rows of ``data`` in order. Nested tensors are concatenated row-wise and each batch-wide value is
    taken from the first part; every part must hold the same keys. The inputs are not modified."""
    data = list(data)
    if not data:
        raise ValueError("concat_tensordict needs at least one tensordict")
    first = data[0]
    if not first.batch_dims:
        return concat_tensordict_with_none_bsz(data)
    keys = list(first.keys())
    for i, td in enumerate(data[1:], start=1):
        if set(td.keys()) != set(keys):
            odd = sorted(map(str, set(td.keys()) ^ set(keys)))[0]
            raise DataProtoError(f"cannot concat: key {odd!r} is not in every part (part 0 vs part {i})")
    nested, batch_wide, regular = [], [], []
    for key in keys:
        value = first.get(key)
        if isinstance(value, torch.Tensor) and value.is_nested:
            nested.append(key)
        elif is_batch_wide(value):
            batch_wide.append(key)
        else:
            regular.append(key)
    for i, td in enumerate(data[1:], start=1):
        for key in nested:
            value = td.get(key)
            if not (isinstance(value, torch.Tensor) and value.is_nested):
                raise DataProtoError(f"cannot concat: {key!r} is a nested tensor in part 0 but not in part {i}")
    out = TensorDict.cat([td.select(*regular) for td in data], dim=0)
    for key in nested:
        out.set(key, concat_nested_tensors([td.get(key) for td in data]))
    for key in batch_wide:
        out.set(key, first.get(key))
    return out.select(*keys)


def pad_to_divisor(data: TensorDict, size_divisor: int) -> tuple[TensorDict, int]:
    """Append copies of the first rows (cyclically) until the length divides ``size_divisor``.

    Returns ``(padded, pad_size)``; undo with :func:`unpad`. ``data`` itself comes back when nothing is added.
    """
    _require_tensordict(data, "pad_to_divisor")
    if isinstance(size_divisor, bool) or not isinstance(size_divisor, int) or size_divisor < 1:
        raise ValueError(f"size_divisor must be a positive int, got {size_divisor!r}")
    rows = len(data)
    pad_size = -rows % size_divisor
    if rows == 0:
        logger.warning("pad_to_divisor: the tensordict has no rows, nothing to pad")
    if pad_size == 0:
        return data, 0
    padding = index_select_tensor_dict(data, torch.arange(pad_size) % rows)
    return concat_tensordict([data, padding]), pad_size


def unpad(data: TensorDict, pad_size: int) -> TensorDict:
    """Drop the last ``pad_size`` rows added by :func:`pad_to_divisor`."""
    rows = len(data)
    if isinstance(pad_size, bool) or not isinstance(pad_size, int) or not 0 <= pad_size <= rows:
        raise ValueError(f"pad_size must be an int in [0, {rows}], got {pad_size!r}")
    return data[: rows - pad_size] if pad_size else data


# ------------------------------------------------------------------------------------------- whole-batch ops


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the entries of ``tensor_dict2`` to ``tensor_dict1`` in place and return it. A key both hold must
    hold equal values (tensors, row objects or batch-wide values), else DataProtoError naming it; a clash
    leaves ``tensor_dict1`` unchanged."""
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(
            f"cannot union tensordicts of batch size {list(tensor_dict1.batch_size)} "
            f"and {list(tensor_dict2.batch_size)}"
        )
    present = set(tensor_dict1.keys())
    added = {}
    for key in tensor_dict2.keys():
        if key not in present:
            added[key] = tensor_dict2.get(key)
        elif not values_equal(_plain(tensor_dict1.get(key)), _plain(tensor_dict2.get(key))):
            raise DataProtoError(
                f"union conflict: `{key}` in tensor_dict1 and tensor_dict2 are not the same object "
                "(they hold different values)"
            )
    for key, value in added.items():
        tensor_dict1.set(key, value)
    return tensor_dict1


def make_iterator(
    tensordict: TensorDict,
    mini_batch_size: int,
    epochs: int,
    seed: int | None = None,
    dataloader_kwargs: dict[str, Any] | None = None,
) -> Iterator[TensorDict]:
    """Mini-batches of ``mini_batch_size`` rows for ``epochs`` passes. Row order comes from a torch
    ``DataLoader`` over the row indices, so ``dataloader_kwargs`` (``shuffle``, ``drop_last``, ...) mean what
    they mean there and ``seed`` fixes the shuffle. The length must divide ``mini_batch_size``."""
    from torch.utils.data import DataLoader

    rows = tensordict.batch_size[0]
    if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or mini_batch_size < 1:
        raise ValueError(f"mini_batch_size must be a positive int, got {mini_batch_size!r}")
    if rows % mini_batch_size:
        raise DataProtoError(f"{rows} rows do not split into mini-batches of {mini_batch_size}")
    options = dict(dataloader_kwargs or {})
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    loader = DataLoader(torch.arange(rows), batch_size=mini_batch_size, generator=generator, **options)

    def batches() -> Iterator[TensorDict]:
        for _ in range(epochs):
            for index in loader:
                yield index_select_tensor_dict(tensordict, index)

    return batches()


def _entry_diff(key: str, a: Any, b: Any) -> str | None:
    if type(a) is not type(b):
        return f"{key!r} has type {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor) and (a.is_nested or b.is_nested):
        if not (a.is_nested and b.is_nested):
            return f"{key!r} is nested on one side only"
        rows_a, rows_b = nested_rows(a), nested_rows(b)
        if len(rows_a) != len(rows_b):
            return f"{key!r} has {len(rows_a)} vs {len(rows_b)} rows"
        for i, (x, y) in enumerate(zip(rows_a, rows_b)):
            if x.shape != y.shape or not torch.equal(x, y):
                return f"{key!r} differs in row {i}"
        return None
    if isinstance(a, torch.Tensor):
        return None if a.shape == b.shape and bool(torch.all(torch.eq(a, b))) else f"{key!r} holds different values"
    return None if values_equal(a, b) else f"{key!r} holds different values"


def assert_tensordict_eq(tensordict1: TensorDict, tensordict2: TensorDict) -> None:
    """Raise AssertionError naming the first key whose presence, type or value differs."""
    keys1, keys2 = set(tensordict1.keys()), set(tensordict2.keys())
    if keys1 != keys2:
        raise AssertionError(f"key sets differ: {sorted(map(str, keys1 ^ keys2))} present on one side only")
    for key in tensordict1.keys():
        diff = _entry_diff(key, tensordict1[key], tensordict2[key])
        if diff is not None:
            raise AssertionError(f"tensordicts differ: {diff}")


def _contiguous_entry(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.contiguous()
    if isinstance(value, TensorDictBase) and not isinstance(value, (NonTensorStack, *_BATCH_WIDE_TYPES)):
        return contiguous(value)
    return value


def contiguous(data: TensorDict) -> TensorDict:
    """A new TensorDict whose tensors are contiguous (so ``consolidate()`` can pack them); row stacks and
    batch-wide values are carried over as they are (tensordict's own ``contiguous`` would rebuild them)."""
    entries = {key: _contiguous_entry(data.get(key)) for key in data.keys()}
    return TensorDict(entries, batch_size=data.batch_size, device=data.device)


def maybe_fix_3d_position_ids(data: TensorDict) -> None:
    """Restore ragged dim 2 on nested 3-D ``position_ids`` (mRoPE rows of shape ``(4, seq_len)``) in place:
    a consolidated, pickled nested tensor can come back with its ragged dimension reset."""
    if "position_ids" not in data.keys():
        return
    position_ids = data.get("position_ids")
    if not (isinstance(position_ids, torch.Tensor) and position_ids.is_nested and position_ids.dim() == 3):
        return
    if ragged_idx(position_ids) != 2:
        data.set(
            "position_ids",
            torch.nested.nested_tensor_from_jagged(position_ids.values(), position_ids.offsets(), jagged_dim=2),
        )
