"""A deterministic checksum over named tensors, shared by the trainer and every rollout engine.

The trainer computes it over the weights it sends; a rollout server computes it over the weights it
actually loaded and reports it back with the version. Equal checksums prove the rollout samples from
the weights the trainer meant, which is what the off-policy bookkeeping (param_version) relies on.

The digest covers each tensor's name, dtype, shape and raw bytes, in name order, so it does not
depend on iteration order, device or memory layout. Engines that keep weights in a different dtype
than the trainer must both hash in that dtype: pass ``dtype=`` on the side that converts.

Hashing is most of a weight sync's cost on the host, so the bytes are hashed in place, in fixed-size
chunks, on a thread pool, with XXH3-128 (xxhash, ~10 GB/s per core against under 1 GB/s for blake2b).
The checksum guards against wrong or partial loads, not against an adversary, which is what a fast
non-cryptographic 128-bit hash is for. The result is a blake2b over the headers and the chunk
digests, the same on every machine.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import torch
import xxhash

__all__ = ["weight_checksum", "tensor_bytes"]

CHUNK_BYTES = 8 << 20  # bytes per independently hashed piece; part of the digest's definition
_PARALLEL_MIN_BYTES = 2 * CHUNK_BYTES  # below this a thread pool costs more than it saves


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Raw little-endian bytes of ``tensor`` in row-major order, for any dtype (bfloat16 included)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def _byte_view(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes in row-major order without copying (one copy only if it is not contiguous on the host)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def _chunk_digest(chunk: memoryview) -> bytes:
    return xxhash.xxh3_128_digest(chunk)


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
    headers: list[bytes] = []
    chunks: list[memoryview] = []
    chunk_counts: list[int] = []
    for name in sorted(by_name):
        tensor = by_name[name]
        if dtype is not None and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        headers.append(f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{tuple(tensor.shape)}|".encode())
        view = _byte_view(tensor)
        pieces = [view[i : i + CHUNK_BYTES] for i in range(0, len(view), CHUNK_BYTES)]
        chunks.extend(pieces)
        chunk_counts.append(len(pieces))
    total = sum(len(chunk) for chunk in chunks)
    workers = min(len(chunks), os.cpu_count() or 1)
    if total >= _PARALLEL_MIN_BYTES and workers > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="weight-checksum") as pool:
            digests = list(pool.map(_chunk_digest, chunks))
    else:
        digests = [_chunk_digest(chunk) for chunk in chunks]
    digest = hashlib.blake2b(digest_size=16)
    position = 0
    for header, count in zip(headers, chunk_counts, strict=True):
        digest.update(header)
        for chunk_digest in digests[position : position + count]:
            digest.update(chunk_digest)
        position += count
    return digest.hexdigest()
