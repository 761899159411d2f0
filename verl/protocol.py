"""DataProto: the one container that travels between the driver and the workers.

A DataProto holds three parts that stay aligned row by row:

- ``batch``: a ``tensordict.TensorDict`` whose first batch dimension indexes samples, or ``None``;
- ``non_tensor_batch``: ``dict[str, np.ndarray]`` (``dtype=object`` for Python objects), one row per sample;
- ``meta_info``: a plain dict of batch-wide values (temperature, micro batch size, ``metrics``...).

Every operation selects, reorders or joins the three parts together, so a sample's tensors and its Python objects
can never drift apart. Derived DataProtos get a shallow copy of ``meta_info``; slices and chunks are views.

Pickling (what Ray uses) ships each tensor as an out-of-band protocol-5 buffer, see
:mod:`verl.utils.tensor_serialization`: a CPU tensor is copied at most once on the way, and tensors always
arrive on CPU.

``chunk`` splits into equal parts only, unless auto padding is on (:class:`DataProtoConfig`), in which case a
worker-group dispatch pads the batch first. Broken contracts (uneven chunks, clashing values) raise
:class:`~verl.utils.protocol_errors.DataProtoError`, both a ``ValueError`` and an ``AssertionError``.

Also exported here, as in upstream verl: the row-folding helpers (:mod:`verl.utils.dataproto_reshape`),
TensorDict conversion (:mod:`verl.utils.dataproto_tensordict`), the tuple serialization format
(:mod:`verl.utils.tensor_serialization`), :class:`BatchData` and :func:`all_gather_data_proto`.
"""

from __future__ import annotations

import copy
import functools
import pickle
import reprlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch
from tensordict import TensorDict

from verl.utils.batch_data import BatchData
from verl.utils.dataproto_collective import all_gather_data_proto
from verl.utils.dataproto_config import PADDING_SIZE_KWARG, DataProtoConfig
from verl.utils.dataproto_info import data_info, size_summary
from verl.utils.dataproto_merge import merge_meta_info, union_meta_info, union_numpy_dict, union_tensor_dict
from verl.utils.dataproto_reshape import fold_batch_dim, unfold_batch_dim, unfold_column_chunks
from verl.utils.dataproto_tensordict import dataproto_to_tensordict, tensordict_to_dataproto_parts
from verl.utils.protocol_errors import DataProtoError
from verl.utils.tensor_serialization import (
    decode_tensordict,
    deserialize_single_tensor,
    deserialize_tensordict,
    encode_tensordict,
    ensure_writable,
    serialize_single_tensor,
    serialize_tensordict,
)
from verl.utils.tensordict_utils import chunk_tensordict, concat_tensordict

__all__ = [
    "BatchData",
    "DataProto",
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoFuture",
    "DataProtoItem",
    "all_gather_data_proto",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "unpad_dataproto",
]

# The kwarg through which dispatch tells the caller how many padded rows to strip (upstream's private name).
_padding_size_key = PADDING_SIZE_KWARG

_STATE_VERSION = 1


# ----------------------------------------------------------------------------------------------------- helpers


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _to_object_array(values: Any, key: str) -> np.ndarray:
    """One row per sample: lists become 1-D object arrays even when their items are equal-length lists."""
    if isinstance(values, np.ndarray):
        return values
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"non-tensor {key!r} must be a numpy array, list or tuple, got {type(values).__name__}")
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def _requested_keys(keys: str | Iterable[str] | None, available: Iterable[Any], where: str) -> list[Any]:
    """Normalize a key selection (None = all) and fail on the first unknown key, naming it."""
    available = list(available)
    if keys is None:
        return available
    keys = [keys] if isinstance(keys, str) else list(keys)
    for key in keys:
        if key not in available:
            raise KeyError(f"{where} key {key!r} not found; available: {available}")
    return keys


# ------------------------------------------------------------------------------------------------ containers


@dataclass
class DataProtoItem:
    """One row of a DataProto: ``batch`` has batch_size [] and each non-tensor value is that row's object."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class DataProto:
    """A batch of samples: tensors, per-sample Python objects and batch-wide meta info (see module docstring)."""

    # Typed as upstream verl does: a DataProto without tensors (batch=None) is the exception, so callers are not made
    # to narrow it at every use. TensorDict is Any to the checker, so the None default type-checks.
    batch: TensorDict = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ------------------------------------------------------------------------------------------ construction

    def check_consistency(self) -> None:
        """Reject wrong types and row-count mismatches, naming the offending key."""
        if self.batch is not None:
            if not isinstance(self.batch, TensorDict):
                raise TypeError(f"DataProto.batch must be a tensordict.TensorDict or None, got {type(self.batch)}")
            if len(self.batch.batch_size) == 0:
                raise DataProtoError("DataProto.batch needs a leading batch dimension, got batch_size=[]")
            if len(self.batch.batch_size) != 1:
                raise DataProtoError(
                    f"a DataProto needs exactly one batch dimension (num_batch_dims=1), got "
                    f"batch_size={list(self.batch.batch_size)}; keep per-group rows with fold_batch_dim"
                )
        if not isinstance(self.non_tensor_batch, dict):
            raise TypeError(f"DataProto.non_tensor_batch must be a dict, got {type(self.non_tensor_batch).__name__}")
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"DataProto.meta_info must be a dict, got {type(self.meta_info).__name__}")
        ref_name, ref_len = None, None
        if self.batch is not None:
            ref_name, ref_len = f"the tensor batch (keys {list(self.batch.keys())})", int(self.batch.batch_size[0])
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray):
                raise TypeError(
                    f"non_tensor_batch[{key!r}] must be a numpy array (dtype=object for Python objects), "
                    f"got {type(value).__name__}"
                )
            if value.ndim == 0:
                raise ValueError(f"non_tensor_batch[{key!r}] must have one row per sample, got a 0-d array")
            if ref_len is None:
                ref_name, ref_len = f"non_tensor_batch[{key!r}]", len(value)
            elif len(value) != ref_len:
                raise DataProtoError(
                    f"batch size mismatch: non_tensor_batch[{key!r}] has {len(value)} rows but {ref_name} has {ref_len}"
                )

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from tensors (dim 0 is the batch) and per-sample objects (lists or arrays; lists become 1-D
        object arrays). ``num_batch_dims`` exists for upstream compatibility and must be 1 (fold groups of rows
        with :func:`fold_batch_dim`). ``auto_padding=True`` marks this batch for auto padding at dispatch
        (see :class:`DataProtoConfig`)."""
        tensors, non_tensors = dict(tensors or {}), dict(non_tensors or {})
        num_batch_dims = _positive_int(num_batch_dims, "num_batch_dims")
        if num_batch_dims != 1:
            raise DataProtoError(
                f"a DataProto keeps exactly one batch dimension, got num_batch_dims={num_batch_dims}; "
                "fold groups of rows with fold_batch_dim instead"
            )
        batch_size, ref_key = None, None
        for key, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(
                    f"tensors[{key!r}] must be a torch.Tensor, got {type(tensor).__name__}; "
                    "put Python objects in non_tensors"
                )
            if tensor.dim() < num_batch_dims:
                raise DataProtoError(
                    f"tensors[{key!r}] has {tensor.dim()} dims, fewer than num_batch_dims={num_batch_dims}"
                )
            shape = list(tensor.shape[:num_batch_dims])
            if batch_size is None:
                batch_size, ref_key = shape, key
            elif shape != batch_size:
                raise DataProtoError(
                    f"batch size mismatch: tensors[{key!r}] has leading shape {shape} but tensors[{ref_key!r}] "
                    f"has {batch_size}"
                )
        batch = TensorDict(tensors, batch_size=batch_size) if tensors else None
        arrays = {key: _to_object_array(value, key) for key, value in non_tensors.items()}
        meta = dict(meta_info or {})
        if auto_padding:
            meta[DataProtoConfig.auto_padding_key] = True
        return cls(batch=batch, non_tensor_batch=arrays, meta_info=meta)

    @classmethod
    def from_single_dict(
        cls, data: dict[str, Any], meta_info: dict[str, Any] | None = None, auto_padding: bool = False
    ) -> DataProto:
        """Split one dict by value type: tensors go to ``batch``, arrays/lists/tuples to ``non_tensor_batch``."""
        tensors, non_tensors = {}, {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, (np.ndarray, list, tuple)):
                non_tensors[key] = value
            else:
                raise TypeError(
                    f"from_single_dict: value of {key!r} must be a torch.Tensor, numpy array, list or tuple, "
                    f"got {type(value).__name__}"
                )
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    @classmethod
    def from_tensordict(
        cls, tensor_dict: TensorDict, meta_info: dict[str, Any] | None = None, num_batch_dims: int = 1
    ) -> DataProto:
        """Inverse of :meth:`to_tensordict`: tensors -> ``batch``, per-row stacks -> ``non_tensor_batch``,
        batch-wide values -> ``meta_info`` (added to the given ``meta_info``)."""
        batch, non_tensor, meta = tensordict_to_dataproto_parts(tensor_dict, meta_info, num_batch_dims)
        return cls(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def to_tensordict(self) -> TensorDict:
        """This batch as one plain TensorDict (see :mod:`verl.utils.dataproto_tensordict`)."""
        return dataproto_to_tensordict(self)

    # ------------------------------------------------------------------------------------------- inspection

    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        for value in self.non_tensor_batch.values():
            return len(value)
        return 0

    def _has_rows(self) -> bool:
        return self.batch is not None or bool(self.non_tensor_batch)

    def __repr__(self) -> str:
        lines = [f"DataProto(len={len(self)}"]
        if self.batch is not None:
            for key, value in self.batch.items(include_nested=True, leaves_only=True):
                desc = f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)} {value.device}"
                lines.append(f"  batch[{key!r}]: {desc}")
        for key, value in self.non_tensor_batch.items():
            lines.append(f"  non_tensor_batch[{key!r}]: {value.dtype}{list(value.shape)}")
        lines.append(f"  meta_info keys: {list(self.meta_info)})")
        return "\n".join(lines)

    def print_size(self, prefix: str = "") -> None:
        """Print the memory held by tensors and numpy arrays (in GB), after ``prefix`` when given."""
        message = size_summary(self)
        print(f"{prefix}, {message}" if prefix else message)

    def get_data_info(self) -> str:
        """A multi-line summary of every entry's shape and type (see :func:`verl.utils.dataproto_info.data_info`)."""
        return data_info(self)

    def __iter__(self) -> Iterator[DataProtoItem]:
        for i in range(len(self)):
            yield self[i]

    # ------------------------------------------------------------------------------------------------ indexing

    def _positions(self, idxs: Any) -> torch.Tensor:
        """Turn an int list/array/tensor or a boolean mask into a 1-D int64 tensor of non-negative rows."""
        n = len(self)
        if isinstance(idxs, torch.Tensor):
            index = idxs.detach().cpu()
        elif isinstance(idxs, np.ndarray):
            index = torch.as_tensor(idxs) if idxs.dtype != object else torch.as_tensor(idxs.tolist())
        else:
            items = list(idxs)
            index = torch.as_tensor(items) if items else torch.zeros(0, dtype=torch.int64)
        if index.dim() != 1:
            raise IndexError(f"row index must be 1-D, got shape {list(index.shape)}")
        if index.dtype == torch.bool:
            if index.numel() != n:
                raise IndexError(f"boolean mask has {index.numel()} entries but the DataProto has {n} rows")
            return index.nonzero().view(-1)
        if index.is_floating_point() or index.is_complex():
            raise TypeError(f"row indices must be integers or booleans, got dtype {index.dtype}")
        index = index.to(torch.int64)
        bad = index[(index < -n) | (index >= n)]
        if bad.numel():
            raise IndexError(f"row index {int(bad[0])} is out of range for a DataProto of {n} rows")
        return torch.where(index < 0, index + n, index)

    def _gather(self, positions: torch.Tensor) -> DataProto:
        batch = None
        if self.batch is not None:
            device = self.batch.device
            batch = self.batch[positions if device is None else positions.to(device)]
        rows = positions.numpy()
        non_tensor = {key: value[rows] for key, value in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    @overload
    def __getitem__(self, item: int) -> DataProtoItem: ...

    @overload
    def __getitem__(self, item: slice | list[Any] | np.ndarray) -> DataProto: ...

    @overload
    def __getitem__(self, item: Any) -> DataProto | DataProtoItem: ...

    def __getitem__(self, item: Any) -> DataProto | DataProtoItem:
        """int -> DataProtoItem; slice -> DataProto view; int list/array/tensor or boolean mask -> DataProto copy."""
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            n = len(self)
            if not -n <= item < n:
                raise IndexError(f"row index {item} is out of range for a DataProto of {n} rows")
            row = int(item) % n
            return DataProtoItem(
                batch=self.batch[row] if self.batch is not None else None,
                non_tensor_batch={key: value[row] for key, value in self.non_tensor_batch.items()},
                meta_info=dict(self.meta_info),
            )
        if isinstance(item, slice):
            return type(self)(
                batch=self.batch[item] if self.batch is not None else None,
                non_tensor_batch={key: value[item] for key, value in self.non_tensor_batch.items()},
                meta_info=dict(self.meta_info),
            )
        if isinstance(item, (str, bytes, bool, float)) or item is None:
            raise TypeError(
                f"DataProto indices must be int, slice, int list/array/tensor or boolean mask, got {item!r}; "
                "use data.batch[key] or data.non_tensor_batch[key] for columns"
            )
        return self.select_idxs(item)

    def select_idxs(self, idxs: Any) -> DataProto:
        """Rows picked by an int list/array/tensor (negative ok, repeats ok) or a boolean mask of length len(self)."""
        return self._gather(self._positions(idxs))

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """``data[start:end:step]`` as a method (views, no copy)."""
        return self[slice(start, end, step)]

    # ------------------------------------------------------------------------------------------ column access

    def select(
        self,
        batch_keys: Iterable[str] | None = None,
        non_tensor_batch_keys: Iterable[str] | None = None,
        meta_info_keys: Iterable[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A new DataProto with the named keys (None = all of that part); unknown keys raise KeyError."""
        batch = None
        if self.batch is not None:
            batch = self.batch.select(*_requested_keys(batch_keys, self.batch.keys(), "batch"))
        elif batch_keys:
            raise KeyError(f"batch keys {list(batch_keys)} requested but this DataProto has no tensor batch")
        nt_keys = _requested_keys(non_tensor_batch_keys, self.non_tensor_batch, "non_tensor_batch")
        non_tensor = {key: self.non_tensor_batch[key] for key in nt_keys}
        meta = {key: self.meta_info[key] for key in _requested_keys(meta_info_keys, self.meta_info, "meta_info")}
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def pop(
        self,
        batch_keys: Iterable[str] | None = None,
        non_tensor_batch_keys: Iterable[str] | None = None,
        meta_info_keys: Iterable[str] | None = None,
    ) -> DataProto:
        """Remove the named keys (None = none) from self and return them as a new DataProto of the same length."""
        nothing: list[str] = []
        if self.batch is None and batch_keys:
            raise KeyError(f"batch keys {list(batch_keys)} requested but this DataProto has no tensor batch")
        b_keys = _requested_keys(batch_keys or nothing, self.batch.keys() if self.batch is not None else [], "batch")
        nt_keys = _requested_keys(non_tensor_batch_keys or nothing, self.non_tensor_batch, "non_tensor_batch")
        m_keys = _requested_keys(meta_info_keys or nothing, self.meta_info, "meta_info")
        popped_batch = None
        if self.batch is not None:
            popped_batch = self.batch.select(*b_keys)
            self.batch = self.batch.exclude(*b_keys)
        popped_nt = {key: self.non_tensor_batch.pop(key) for key in nt_keys}
        popped_meta = {key: self.meta_info.pop(key) for key in m_keys}
        return DataProto(batch=popped_batch, non_tensor_batch=popped_nt, meta_info=popped_meta)

    def rename(self, old_keys: str | Iterable[str] | None = None, new_keys: str | Iterable[str] | None = None):
        """Rename batch (or non-tensor) keys in place; returns self. The new names must be free."""
        old = [old_keys] if isinstance(old_keys, str) else list(old_keys or [])
        new = [new_keys] if isinstance(new_keys, str) else list(new_keys or [])
        if len(old) != len(new):
            raise ValueError(f"rename needs as many new keys as old keys, got {old} -> {new}")
        batch = self.batch.copy() if self.batch is not None else None
        non_tensor = dict(self.non_tensor_batch)
        for src, dst in zip(old, new):
            in_batch = batch is not None and src in batch.keys()
            if not in_batch and src not in non_tensor:
                raise KeyError(f"rename: key {src!r} is in neither batch nor non_tensor_batch")
            if (batch is not None and dst in batch.keys()) or dst in non_tensor:
                raise ValueError(f"rename: target key {dst!r} already exists")
            if in_batch:
                batch.rename_key_(src, dst)
            else:
                non_tensor = {(dst if key == src else key): value for key, value in non_tensor.items()}
        self.batch, self.non_tensor_batch = batch, non_tensor
        return self

    # -------------------------------------------------------------------------------------------- reshaping

    def reorder(self, indices: Any) -> None:
        """Permute the rows in place; ``indices`` must be a permutation of range(len(self))."""
        positions = self._positions(indices)
        if positions.numel() != len(self) or not torch.equal(torch.sort(positions).values, torch.arange(len(self))):
            raise DataProtoError(
                f"reorder needs a permutation of range({len(self)}), got {reprlib.repr(positions.tolist())}"
            )
        reordered = self._gather(positions)
        self.batch, self.non_tensor_batch = reordered.batch, reordered.non_tensor_batch

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Each row ``repeat_times`` times: interleaved [a, a, b, b] or tiled [a, b, a, b]."""
        repeat_times = _positive_int(repeat_times, "repeat_times")
        rows = torch.arange(len(self))
        return self._gather(rows.repeat_interleave(repeat_times) if interleave else rows.repeat(repeat_times))

    def sample_level_repeat(self, repeat_times: Any) -> DataProto:
        """Row i repeated ``repeat_times[i]`` times, in row order (a list, tuple, array or tensor of counts)."""
        counts = torch.as_tensor(list(repeat_times) if isinstance(repeat_times, tuple) else repeat_times)
        if counts.dim() != 1 or counts.numel() != len(self):
            raise DataProtoError(
                f"sample_level_repeat needs one count per row ({len(self)}), got shape {list(counts.shape)}"
            )
        if counts.is_floating_point() or counts.dtype == torch.bool or (counts < 0).any():
            raise ValueError(f"repeat counts must be non-negative ints, got {reprlib.repr(counts.tolist())}")
        return self._gather(torch.arange(len(self)).repeat_interleave(counts.to(torch.int64)))

    def unfold_column_chunks(self, n_split: int, split_keys: Iterable[str] | None = None) -> DataProto:
        """Cut dim 1 of the ``split_keys`` entries into ``n_split`` rows each; other entries repeat each row
        ``n_split`` times (see :func:`verl.utils.dataproto_reshape.unfold_column_chunks`)."""
        return unfold_column_chunks(self, n_split, split_keys)

    def _split_sizes(self, sizes: list[int]) -> list[DataProto]:
        parts, start = [], 0
        for size in sizes:
            parts.append(self[start : start + size])
            start += size
        return parts

    def is_padding_enabled(self) -> bool:
        """Whether dispatch may pad this batch: its own ``auto_padding`` mark, or :class:`DataProtoConfig`."""
        return bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the last row (``padding_candidate="first"``: the first) in place."""
        if isinstance(padding_size, bool) or not isinstance(padding_size, (int, np.integer)) or padding_size < 0:
            raise ValueError(f"padding_size must be a non-negative int, got {padding_size!r}")
        if padding_size == 0:
            return
        if len(self) == 0:
            raise DataProtoError(f"cannot pad an empty DataProto with {padding_size} rows: it has no row to copy")
        row = 0 if padding_candidate == "first" else len(self) - 1
        padded = self._gather(torch.cat([torch.arange(len(self)), torch.full((padding_size,), row)]))
        self.batch, self.non_tensor_batch = padded.batch, padded.non_tensor_batch

    def chunk(self, chunks: int) -> list[DataProto]:
        """``chunks`` equal views; ``DataProto.concat(data.chunk(k))`` restores ``data``.

        The length must divide ``chunks`` (DataProtoError otherwise: pad first with
        :func:`pad_dataproto_to_divisor`), unless :meth:`is_padding_enabled`, where an uneven length gives
        :meth:`chunk_balanced` parts. An empty DataProto chunks into empty parts that keep meta_info, so
        meta-only calls can be broadcast.
        """
        chunks = _positive_int(chunks, "chunks")
        n = len(self)
        if n % chunks and not self.is_padding_enabled():
            raise DataProtoError(
                f"cannot chunk {n} rows into {chunks} chunks of equal size; pad first with "
                f"pad_dataproto_to_divisor(data, {chunks}) or enable DataProtoConfig.auto_padding"
            )
        return self.chunk_balanced(chunks)

    def chunk_balanced(self, chunks: int) -> list[DataProto]:
        """Exactly ``chunks`` views whose sizes differ by at most one (the first ``len % chunks`` get one more),
        for callers that can take uneven parts (e.g. spreading prompts over rollout workers).

        ``chunks > len(self) > 0`` raises: an empty chunk would reach a worker.
        """
        chunks = _positive_int(chunks, "chunks")
        n = len(self)
        if 0 < n < chunks:
            raise DataProtoError(
                f"cannot chunk {n} rows into {chunks} chunks without empty chunks; "
                f"pad first with pad_dataproto_to_divisor(data, {chunks})"
            )
        base, extra = divmod(n, chunks)
        return self._split_sizes([base + (1 if i < extra else 0) for i in range(chunks)])

    def split(self, split_size: int) -> list[DataProto]:
        """Views of ``split_size`` rows each, the last one shorter when len is not divisible."""
        split_size = _positive_int(split_size, "split_size")
        n = len(self)
        sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
        return self._split_sizes(sizes) if sizes else [self[0:0]]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Rows of all parts in order; batch and non-tensor keys must match across parts.

        meta_info (see :func:`verl.utils.dataproto_merge.merge_meta_info`): keys are united, a key in several parts
        must be equal there (else DataProtoError naming it), and ``metrics`` dicts merge into ``{name: [values...]}``.
        """
        data = list(data)
        if not data:
            raise ValueError("DataProto.concat needs at least one DataProto")
        for i, part in enumerate(data):
            if not isinstance(part, DataProto):
                raise TypeError(f"DataProto.concat: part {i} is a {type(part).__name__}, not a DataProto")
        with_batch = [part.batch is not None for part in data]
        if any(with_batch) and not all(with_batch):
            raise DataProtoError(
                f"cannot concat: part {with_batch.index(True)} has a tensor batch but part "
                f"{with_batch.index(False)} has none"
            )
        batch = None
        if all(with_batch):
            ref = set(data[0].batch.keys(include_nested=True, leaves_only=True))
            for i, part in enumerate(data[1:], start=1):
                keys = set(part.batch.keys(include_nested=True, leaves_only=True))
                if keys != ref:
                    raise DataProtoError(
                        f"cannot concat: batch key {sorted(keys ^ ref, key=str)[0]!r} is not in every part "
                        f"(part 0 vs part {i})"
                    )
            batch = torch.cat([part.batch for part in data], dim=0)
        non_tensor = {}
        for key in data[0].non_tensor_batch:
            for i, part in enumerate(data):
                if key not in part.non_tensor_batch:
                    raise DataProtoError(f"cannot concat: non_tensor_batch key {key!r} is missing from part {i}")
            non_tensor[key] = np.concatenate([part.non_tensor_batch[key] for part in data], axis=0)
        for i, part in enumerate(data):
            extra = set(part.non_tensor_batch) - set(non_tensor)
            if extra:
                raise DataProtoError(
                    f"cannot concat: non_tensor_batch key {sorted(extra)[0]!r} is missing from part 0 "
                    f"but present in part {i}"
                )
        meta = merge_meta_info([part.meta_info for part in data])
        return type(data[0])(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other``'s keys into self (in place, returns self). Keys both hold must be equal, else
        DataProtoError naming the key; nothing changes when it raises."""
        if not isinstance(other, DataProto):
            raise TypeError(f"DataProto.union needs a DataProto, got {type(other).__name__}")
        if self._has_rows() and other._has_rows() and len(self) != len(other):
            raise DataProtoError(f"cannot union DataProtos of {len(self)} and {len(other)} rows")
        batch = self.batch
        if batch is None:
            batch = other.batch
        elif other.batch is not None:
            batch = union_tensor_dict(batch.copy(), other.batch)  # merged into a copy: self stays intact on a clash
        non_tensor = union_numpy_dict(dict(self.non_tensor_batch), other.non_tensor_batch)
        meta = union_meta_info(self.meta_info, other.meta_info)
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor, meta
        self.check_consistency()
        return self

    # ------------------------------------------------------------------------------------------ movement

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensor batch to ``device`` (in place, returns self)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def make_iterator(
        self,
        mini_batch_size: int,
        epochs: int,
        seed: int | None = None,
        dataloader_kwargs: dict[str, Any] | None = None,
    ) -> Iterator[DataProto]:
        """Mini-batches of ``mini_batch_size`` rows, ``epochs`` passes over the data.

        ``dataloader_kwargs`` accepts ``shuffle`` (default False, as for a torch DataLoader and in upstream verl;
        True draws a fresh permutation each epoch, reproducible for a given ``seed``) and ``drop_last`` (default
        False: the last mini-batch may be shorter).
        """
        options = dict(dataloader_kwargs or {})
        unknown = sorted(set(options) - {"shuffle", "drop_last"})
        if unknown:
            raise ValueError(
                f"make_iterator: unsupported dataloader_kwargs key {unknown[0]!r} (use shuffle, drop_last)"
            )
        mini_batch_size = _positive_int(mini_batch_size, "mini_batch_size")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"epochs must be a non-negative int, got {epochs!r}")
        shuffle, drop_last = bool(options.get("shuffle", False)), bool(options.get("drop_last", False))
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        n = len(self)

        def batches() -> Iterator[DataProto]:
            for _ in range(epochs):
                order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
                for start in range(0, n, mini_batch_size):
                    rows = order[start : start + mini_batch_size]
                    if drop_last and rows.numel() < mini_batch_size:
                        break
                    yield self._gather(rows)

        return batches()

    def save_to_disk(self, filepath: str | Path) -> None:
        """Pickle to ``filepath`` (protocol 5, tensors in-band)."""
        with open(filepath, "wb") as f:
            pickle.dump(self, f, protocol=5)

    @staticmethod
    def load_from_disk(filepath: str | Path) -> DataProto:
        """Read a file written by :meth:`save_to_disk`."""
        with open(filepath, "rb") as f:
            data = pickle.load(f)
        if not isinstance(data, DataProto):
            raise TypeError(f"{filepath} holds a {type(data).__name__}, not a DataProto")
        return data

    # ------------------------------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict:
        return {
            "version": _STATE_VERSION,
            "batch": encode_tensordict(self.batch) if self.batch is not None else None,
            "non_tensor_batch": self.non_tensor_batch,
            "meta_info": self.meta_info,
        }

    def __setstate__(self, state: dict) -> None:
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"unsupported DataProto pickle version {state.get('version')!r}; expected {_STATE_VERSION}"
            )
        self.batch = decode_tensordict(state["batch"]) if state["batch"] is not None else None
        self.non_tensor_batch = {key: ensure_writable(value) for key, value in state["non_tensor_batch"].items()}
        self.meta_info = state["meta_info"]


# ------------------------------------------------------------------------------------------ module functions


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append copies of the first rows (cyclically) until len is a multiple of ``size_divisor``.

    Returns ``(padded, pad_size)``; undo with :func:`unpad_dataproto`. ``data`` itself is returned when no
    padding is needed.
    """
    size_divisor = _positive_int(size_divisor, "size_divisor")
    n = len(data)
    pad_size = -n % size_divisor
    if pad_size == 0:
        return data, 0
    rows = torch.cat([torch.arange(n), torch.arange(pad_size) % n])
    return data._gather(rows), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows added by :func:`pad_dataproto_to_divisor`."""
    if isinstance(pad_size, bool) or not isinstance(pad_size, (int, np.integer)) or not 0 <= pad_size <= len(data):
        raise ValueError(f"pad_size must be an int in [0, {len(data)}], got {pad_size!r}")
    return data[: len(data) - pad_size] if pad_size else data


def collate_fn(items: list[DataProtoItem]) -> DataProto:
    """Stack DataProtoItems (e.g. from a torch DataLoader) back into a DataProto; meta_info of the first item."""
    items = list(items)
    if not items:
        raise ValueError("collate_fn needs at least one DataProtoItem")
    with_batch = [item.batch is not None for item in items]
    if any(with_batch) and not all(with_batch):
        raise ValueError(f"collate_fn: item {with_batch.index(False)} has no tensor batch but others do")
    batch = torch.stack([item.batch for item in items]) if all(with_batch) else None
    keys = list(items[0].non_tensor_batch)
    non_tensor = {}
    for key in keys:
        missing = [i for i, item in enumerate(items) if key not in item.non_tensor_batch]
        if missing:
            raise ValueError(f"collate_fn: non_tensor_batch key {key!r} is missing from item {missing[0]}")
        non_tensor[key] = _to_object_array([item.non_tensor_batch[key] for item in items], key)
    return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(items[0].meta_info))


def _dispatch_chunk(data: Any, chunks: int, index: int, inner: Callable | None) -> Any:
    if inner is not None:
        data = inner(data)
    if isinstance(data, TensorDict):
        return chunk_tensordict(data, chunks)[index]
    # a future's length is unknown when it is dispatched, so it is not padded: parts may differ by one row
    return data.chunk_balanced(chunks)[index]


def _concat_results(outputs: list[Any]) -> Any:
    """Join per-rank results: DataProtos with ``DataProto.concat``, TensorDicts with ``concat_tensordict``."""
    if outputs and isinstance(outputs[0], TensorDict):
        return concat_tensordict(outputs)
    return DataProto.concat(outputs)


@dataclass
class DataProtoFuture:
    """A DataProto (or TensorDict) that is still being computed: Ray object refs, how to combine their results
    (``collect_fn``, e.g. ``DataProto.concat``) and an optional ``dispatch_fn`` applied afterwards (e.g. take
    chunk i). Used by the single controller for ``blocking=False`` calls; picklable, so a worker can receive
    it and call ``get()``."""

    collect_fn: Callable[[list[DataProto]], DataProto]
    futures: list[Any]
    dispatch_fn: Callable[[DataProto], DataProto] | None = None

    @staticmethod
    def concat(data: list[Any]) -> DataProtoFuture:
        """A future of the concatenated results of ``data`` (object refs of DataProtos or TensorDicts)."""
        return DataProtoFuture(collect_fn=_concat_results, futures=list(data))

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures; future i resolves to chunk i of this future's result."""
        chunks = _positive_int(chunks, "chunks")
        return [
            DataProtoFuture(
                collect_fn=self.collect_fn,
                futures=self.futures,
                dispatch_fn=functools.partial(_dispatch_chunk, chunks=chunks, index=i, inner=self.dispatch_fn),
            )
            for i in range(chunks)
        ]

    def get(self, timeout: float | None = None) -> DataProto:
        """Wait for every ref (up to ``timeout`` seconds), collect, then dispatch."""
        import ray  # lazily: DataProto itself must not need Ray

        try:
            outputs = ray.get(list(self.futures), timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(
                f"DataProtoFuture timed out after {timeout}s waiting on {len(self.futures)} object refs"
            ) from exc
        for i, output in enumerate(outputs):
            if not isinstance(output, (DataProto, TensorDict)):
                raise TypeError(
                    f"DataProtoFuture: ref {i} resolved to a {type(output).__name__}, not a DataProto or TensorDict"
                )
        result = self.collect_fn(outputs)
        return self.dispatch_fn(result) if self.dispatch_fn is not None else result
