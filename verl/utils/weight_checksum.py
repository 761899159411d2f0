"""A deterministic checksum over named tensors, shared by the trainer and every rollout engine.

The trainer computes it over the weights it sends; a rollout server computes it over the weights it
actually loaded and reports it back with the version. Equal checksums prove the rollout samples from
the weights the trainer meant, which is what the off-policy bookkeeping (param_version) relies on.

The digest covers each tensor's name, dtype, shape and raw bytes, in name order, so it does not
depend on iteration order, device or memory layout. Engines that keep weights in a different dtype
than the trainer must both hash in that dtype: pass ``dtype=`` on the side that converts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import torch

__all__ = ["weight_checksum", "tensor_bytes"]


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Raw little-endian bytes of ``tensor`` in row-major order, for any dtype (bfloat16 included)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def weight_checksum(
    named_tensors: Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor],
    dtype: torch.dtype | None = None,
) -> str:
    """Hex digest over ``(name, tensor)`` pairs, independent of their order.

    Args:
        named_tensors: pairs or a mapping from parameter name to tensor.
        dtype: cast every tensor to this dtype before hashing (e.g. the rollout dtype), or keep each as is.

    Raises:
        ValueError: a name appears twice, or a value is not a tensor.
    """
    items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
    by_name: dict[str, torch.Tensor] = {}
    for name, tensor in items:
        if name in by_name:
            raise ValueError(f"weight_checksum: tensor name {name!r} appears twice")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"weight_checksum: value for {name!r} is {type(tensor).__name__}, not a torch.Tensor")
        by_name[name] = tensor
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(by_name):
        tensor = by_name[name]
        if dtype is not None and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        header = f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{tuple(tensor.shape)}|"
        digest.update(header.encode())
        digest.update(tensor_bytes(tensor))
    return digest.hexdigest()
