"""Pickle tensors as flat byte arrays so that pickle protocol 5 can ship them out of band.

WHY: torch pickles a tensor through its storage: the bytes go in-band (copied into the pickle payload, then
copied again on load), and a view pickles its *whole* storage, so a small chunk of a large batch drags the full
batch along. Ray pickles with protocol 5 and a ``buffer_callback``; numpy arrays then travel as out-of-band
buffers that Ray writes straight into its object store and maps back without a copy. Exposing each tensor as a
numpy ``uint8`` view of exactly its own bytes (any dtype, bfloat16 and float8 included, since numpy lacks those)
puts tensors on that fast path.

Copies: encoding copies nothing for a contiguous CPU tensor (non-contiguous tensors are made contiguous, CUDA
tensors are moved to host first). Decoding wraps a writable buffer without a copy and copies a read-only buffer
(what Ray's object store hands out) exactly once, so every decoded tensor is writable and owns safe memory;
``copy_readonly=False`` skips that copy for receivers that only read (weight buckets).
Decoded tensors always live on CPU; callers move them with ``.to(device)``.

:func:`serialize_tensordict` / :func:`deserialize_tensordict` (and their single-tensor parts) speak upstream
verl's tuple format for the same idea, ``(batch_size, device, {key: (dtype, shape, bytes)})``, with nested
tensors as ``(layout, [row, ...])``; they reuse the encoder above.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = [
    "decode_tensor",
    "decode_tensordict",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "encode_tensor",
    "encode_tensordict",
    "ensure_writable",
    "serialize_single_tensor",
    "serialize_tensordict",
]

_RAW = "raw"  # flat uint8 bytes + dtype + shape: goes out of band under protocol 5
_OBJ = "obj"  # anything else (sparse, quantized, non-tensor leaves): pickled the ordinary way


def ensure_writable(array: np.ndarray) -> np.ndarray:
    """Return ``array`` itself when writable, else one private copy (read-only buffers come from Ray's store)."""
    return array if array.flags.writeable else array.copy()


def encode_tensor(tensor: Any) -> tuple:
    """Describe ``tensor`` as ``("raw", dtype_name, shape, uint8 ndarray view)``; the array shares its memory."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or tensor.is_quantized:
        return (_OBJ, tensor)
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    flat = t.reshape(-1)
    raw = flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)
    return (_RAW, str(t.dtype).removeprefix("torch."), tuple(t.shape), raw.numpy())


def decode_tensor(state: tuple, *, copy_readonly: bool = True) -> Any:
    """Inverse of :func:`encode_tensor`; at most one copy (only when the buffer is read-only).

    ``copy_readonly=False`` wraps a read-only buffer without copying: for receivers that only read the tensor
    (a weight bucket is copied into the engine's own parameters), where the copy would be pure overhead. Such
    a tensor must not be written to: its memory belongs to the sender's buffer (Ray's object store).
    """
    kind = state[0]
    if kind == _OBJ:
        return state[1]
    if kind != _RAW:
        raise ValueError(f"unknown encoded tensor kind {kind!r}; expected {_RAW!r} or {_OBJ!r}")
    _, dtype_name, shape, array = state
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"encoded tensor names unknown torch dtype {dtype_name!r}")
    if copy_readonly or array.flags.writeable:
        flat = torch.from_numpy(ensure_writable(array))
    else:
        with warnings.catch_warnings():  # torch warns that it cannot mark the tensor read-only; the caller knows
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.from_numpy(array)
    if dtype != torch.uint8:
        flat = flat.view(dtype)
    return flat.view(shape)


def encode_tensordict(td: TensorDict) -> dict:
    """Flatten a TensorDict (nested keys become tuples) into picklable, out-of-band friendly state."""
    return {
        "batch_size": list(td.batch_size),
        "items": [(key, encode_tensor(value)) for key, value in td.items(include_nested=True, leaves_only=True)],
    }


def decode_tensordict(state: dict) -> TensorDict:
    """Rebuild the TensorDict written by :func:`encode_tensordict` (tensors on CPU)."""
    td = TensorDict({}, batch_size=state["batch_size"])
    for key, encoded in state["items"]:
        td.set(key, decode_tensor(encoded))
    return td


# ------------------------------------------------------------------------- upstream verl's tuple format


def serialize_single_tensor(obj: torch.Tensor) -> tuple[str, torch.Size, np.ndarray]:
    """``(dtype name, shape, flat uint8 view)`` of a dense tensor; the array shares memory when it can."""
    if not isinstance(obj, torch.Tensor) or obj.is_nested or obj.layout != torch.strided:
        raise TypeError(f"serialize_single_tensor needs a dense torch.Tensor, got {type(obj).__name__}")
    _, dtype_name, _, raw = encode_tensor(obj)
    return dtype_name, obj.shape, raw


def deserialize_single_tensor(arr: tuple[str, Any, Any]) -> torch.Tensor:
    """Inverse of :func:`serialize_single_tensor`; the bytes may be an ndarray, bytes or memoryview. The result is
    a writable CPU tensor (a read-only buffer is copied once)."""
    dtype_name, shape, data = arr
    array = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    return decode_tensor((_RAW, dtype_name, tuple(shape), array.reshape(-1).view(np.uint8)))


def serialize_tensordict(batch: TensorDict) -> tuple[tuple[int, ...], str | None, dict[Any, tuple]]:
    """``(batch_size, device, items)``: dense leaves as :func:`serialize_single_tensor` triples, nested tensors as
    ``(layout name, [row triple, ...])``. Nested keys are tuples."""
    items: dict[Any, tuple] = {}
    for key, value in batch.items(include_nested=True, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"serialize_tensordict: {key!r} holds a {type(value).__name__}, not a tensor")
        if value.is_nested:
            layout = str(value.layout).removeprefix("torch.")
            items[key] = (layout, [serialize_single_tensor(row) for row in value.unbind(0)])
        else:
            items[key] = serialize_single_tensor(value)
    device = str(batch.device) if batch.device is not None else None
    return tuple(batch.batch_size), device, items


def deserialize_tensordict(arr: tuple[Any, str | None, dict[Any, tuple]]) -> TensorDict:
    """Inverse of :func:`serialize_tensordict` (tensors land on CPU, then move to the recorded device)."""
    batch_size, device, items = arr
    td = TensorDict({}, batch_size=batch_size)
    for key, encoded in items.items():
        if len(encoded) == 3:
            td.set(key, deserialize_single_tensor(encoded))
        elif len(encoded) == 2:
            layout_name, rows = encoded
            layout = getattr(torch, layout_name, None)
            if not isinstance(layout, torch.layout):
                raise ValueError(f"serialized nested tensor {key!r} names unknown layout {layout_name!r}")
            td.set(key, torch.nested.as_nested_tensor([deserialize_single_tensor(r) for r in rows], layout=layout))
        else:
            raise ValueError(
                f"serialized entry {key!r} must be a (dtype, shape, data) or (layout, rows) tuple, "
                f"got {len(encoded)} fields"
            )
    return td.to(device) if device is not None else td
