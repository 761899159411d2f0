"""Row-wise helpers for jagged nested tensors (one variable-length sample per row, no padding).

WHY: a jagged tensor stores its rows back to back in ``values()`` along one ragged dimension, with ``offsets()``
marking where each row starts. TensorDict cannot chunk, index or concatenate such tensors along the batch
dimension, and ``unbind`` has been unreliable for 3-D jagged tensors whose ragged dimension is not the last
(mRoPE ``position_ids``: rows of shape ``(4, seq_len)``). These helpers slice rows straight out of ``values()``
and rebuild results with the *same* ragged dimension, so a chunk or selection looks like its source.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "concat_nested_tensors",
    "nested_rows",
    "nested_tensor_from_tensor_list",
    "ragged_idx",
    "select_nested_rows",
]


def ragged_idx(nested: torch.Tensor) -> int:
    """The ragged dimension of ``nested`` (as a dim of the nested tensor, so 1 means a row's first dim)."""
    return int(getattr(nested, "_ragged_idx", nested.dim() - 1))


def nested_tensor_from_tensor_list(tensors: Sequence[torch.Tensor], ragged_idx: int | None = None) -> torch.Tensor:
    """A jagged nested tensor whose row i is ``tensors[i]``.

    Rows may differ only along their dim ``ragged_idx - 1``; ``ragged_idx`` defaults to a row's last dim (the
    sequence dim for ``(seq_len,)`` tokens and ``(4, seq_len)`` mRoPE position ids).
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("nested_tensor_from_tensor_list needs at least one tensor")
    row_dims = tensors[0].dim()
    if ragged_idx is None:
        ragged_idx = row_dims
    if not 1 <= ragged_idx <= row_dims:
        raise ValueError(f"ragged_idx must be in [1, {row_dims}] for rows of {row_dims} dims, got {ragged_idx}")
    dim = ragged_idx - 1
    for i, tensor in enumerate(tensors):
        if tensor.dim() != row_dims:
            raise ValueError(f"row {i} has {tensor.dim()} dims but row 0 has {row_dims}")
    values = torch.cat(tensors, dim=dim)
    lengths = torch.tensor([t.shape[dim] for t in tensors], dtype=torch.long, device=values.device)
    offsets = torch.zeros(len(tensors) + 1, dtype=torch.long, device=values.device)
    torch.cumsum(lengths, dim=0, out=offsets[1:])
    return torch.nested.nested_tensor_from_jagged(values, offsets=offsets, jagged_dim=ragged_idx)


def nested_rows(nested: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a nested tensor as views (jagged: slices of ``values()``; strided layout: ``unbind``)."""
    if not nested.is_nested:
        raise TypeError(f"expected a nested tensor, got a dense one of shape {list(nested.shape)}")
    if nested.layout != torch.jagged or nested.lengths() is not None:  # strided layout, or a non-contiguous view
        return list(nested.unbind(0))
    values, dim = nested.values(), ragged_idx(nested) - 1
    bounds = nested.offsets().tolist()
    return [values.narrow(dim, start, end - start) for start, end in zip(bounds[:-1], bounds[1:])]


def _positions(index: torch.Tensor | Sequence[int], rows: int) -> list[int]:
    index = torch.as_tensor(index)
    if index.dim() != 1:
        raise ValueError(f"row index must be 1-D, got shape {list(index.shape)}")
    if index.dtype == torch.bool:
        if index.numel() != rows:
            raise ValueError(f"boolean mask has {index.numel()} entries but the nested tensor has {rows} rows")
        index = index.nonzero().view(-1)
    return index.tolist()


def select_nested_rows(nested: torch.Tensor, index: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """Rows ``index`` (ints, negatives ok, or a boolean mask) of ``nested``, keeping its ragged dimension."""
    rows = nested_rows(nested)
    picked = [rows[i] for i in _positions(index, len(rows))]
    if not picked:
        raise ValueError("cannot build a nested tensor with no rows; select at least one row")
    return nested_tensor_from_tensor_list(picked, ragged_idx=ragged_idx(nested))


def concat_nested_tensors(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate nested tensors along the batch dim (what ``torch.cat`` cannot do for jagged tensors)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("concat_nested_tensors needs at least one nested tensor")
    for i, tensor in enumerate(tensors):
        if not tensor.is_nested:
            raise TypeError(f"tensor {i} is not nested (shape {list(tensor.shape)})")
    rows = [row for tensor in tensors for row in nested_rows(tensor)]
    return nested_tensor_from_tensor_list(rows, ragged_idx=ragged_idx(tensors[0]))
