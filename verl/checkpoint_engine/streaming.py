"""verl's per-process checkpoint-engine contract: a trainer rank streams ``(name, tensor)`` pairs, receivers yield them.

This is the interface verl's recipes and plugins program against (``CheckpointEngineRegistry.register(name)`` on a
``CheckpointEngine`` subclass). One engine instance lives in each process of the transfer: every trainer rank calls
``send_weights`` with its weight stream, every receiving process iterates ``receive_weights`` and hands the pairs to
its rollout server. Around each transfer the driver calls ``prepare`` everywhere, ``build_topology`` once with what
``prepare`` returned, ``init_process_group`` everywhere with the topology, and ``finalize`` when done.

The built-in ``naive`` engine (``ColocatedCheckpointEngine``) passes the stream within one process (trainer and
rollout colocated), so it needs no topology. The trainers in this package move weights with the version- and
checksum-checked backends of :mod:`verl.checkpoint_engine.backend` (``CheckpointEngineManager``).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "CheckpointEngine",
    "CheckpointEngineRegistry",
    "CheckpointEngineWithCache",
    "ColocatedCheckpointEngine",
    "TensorMeta",
    "ensure_async_iterator",
    "merge_weight_chunks",
    "split_weight_chunks",
]


@dataclass
class TensorMeta:
    """Where one chunk of a tensor travels: the tensor's name, shape and dtype, the chunk's byte range within the
    tensor (``chunk_offset``, ``chunk_size``) and its byte offset in the transfer bucket (``offset``, once placed)."""

    name: str
    shape: torch.Size
    dtype: torch.dtype
    chunk_offset: int
    chunk_size: int
    offset: int | None


class CheckpointEngineRegistry:
    """Engines by backend name (``rollout.checkpoint_engine.backend``).

    Optional engines whose module failed to import are recorded with ``record_import_error``, so asking for one
    reports the missing dependency instead of only "not registered".
    """

    _registry: dict[str, type[CheckpointEngine]] = {}
    _import_errors: dict[str, ImportError] = {}

    @staticmethod
    def register(backend: str):
        """Class decorator registering a ``CheckpointEngine`` subclass under ``backend`` (a later one replaces it)."""

        def decorator(cls: type[CheckpointEngine]) -> type[CheckpointEngine]:
            if not (isinstance(cls, type) and issubclass(cls, CheckpointEngine)):
                raise TypeError(f"CheckpointEngineRegistry.register({backend!r}): {cls!r} is not a CheckpointEngine")
            CheckpointEngineRegistry._registry[backend] = cls
            return cls

        return decorator

    @classmethod
    def record_import_error(cls, module: str, error: ImportError) -> None:
        cls._import_errors[module] = error

    @classmethod
    def get(cls, backend: str) -> type[CheckpointEngine]:
        if backend not in cls._registry:
            message = (
                f"checkpoint engine {backend!r} is not registered; registered: {sorted(cls._registry)} "
                "(the trainers' own weight-sync backends are driven by CheckpointEngineManager)"
            )
            if cls._import_errors:
                failed = ", ".join(f"{module}: {error}" for module, error in sorted(cls._import_errors.items()))
                message += f"; engine modules that failed to import: {failed}"
            raise ValueError(message)
        return cls._registry[backend]

    @classmethod
    def new(cls, backend: str, *args: Any, **kwargs: Any) -> CheckpointEngine:
        return cls.get(backend)(*args, **kwargs)

    @classmethod
    def registered(cls) -> list[str]:
        return sorted(cls._registry)


class CheckpointEngine(abc.ABC):
    """One process's end of a weight transfer (see the module docstring for the call order).

    ``wire_format`` tells the receiving server how ``receive_weights`` yields: ``"named_tensors"`` (full
    ``(name, tensor)`` pairs) or ``"delta_flush"`` (``(named_tensors, is_last)`` flushes of sparse updates).
    """

    wire_format = "named_tensors"

    @abc.abstractmethod
    def prepare(self) -> dict[str, Any]:
        """Allocate buffers for the next transfer; return what peers need to connect (address, registration)."""

    @classmethod
    @abc.abstractmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """From every process's ``prepare`` output (trainer ranks first), the ``init_process_group`` keyword
        arguments of each side: ``{kwarg: [value for each rank]}`` for the trainer group, then for the receivers."""

    @abc.abstractmethod
    def init_process_group(self, **kwargs: Any) -> None:
        """Connect to the peers with this process's share of ``build_topology``."""

    @abc.abstractmethod
    def finalize(self) -> None:
        """Free what ``prepare`` / ``init_process_group`` set up."""

    @abc.abstractmethod
    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None) -> Any:
        """Send the stream of ``(name, tensor)``; ``global_steps`` is the trainer step the weights belong to."""

    @abc.abstractmethod
    def receive_weights(self, global_steps: int | None = None) -> Any:
        """Yield the received ``(name, tensor)`` pairs (a sync or async iterator)."""


class CheckpointEngineWithCache(CheckpointEngine):
    """An engine that keeps received weights locally (shared memory, disk), so a server can pick them up after its
    in-flight requests finish instead of being interrupted."""

    @abc.abstractmethod
    async def get_weights(self) -> AsyncIterator[tuple[str, torch.Tensor]]:
        """Yield the cached ``(name, tensor)`` pairs."""


@CheckpointEngineRegistry.register("naive")
class ColocatedCheckpointEngine(CheckpointEngine):
    """Trainer and rollout in one process: ``send_weights`` hands over the stream, ``receive_weights`` replays it
    once. No peers, so preparing and connecting are no-ops."""

    def __init__(self, bucket_size: int, is_master: bool = False) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.weights: Iterable[tuple[str, torch.Tensor]] | None = None

    def prepare(self) -> dict[str, Any]:
        return {}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        return {}, {}

    def init_process_group(self, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"the naive checkpoint engine connects to no peers; got {sorted(kwargs)}")

    def finalize(self) -> None:
        self.weights = None

    def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None) -> None:
        self.weights = weights

    def receive_weights(self, global_steps: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        if self.weights is None:
            raise RuntimeError("naive checkpoint engine: receive_weights before send_weights in this process")
        weights, self.weights = self.weights, None
        yield from weights


async def ensure_async_iterator(source: Any) -> AsyncIterator[Any]:
    """Iterate a sync or async iterable asynchronously."""
    if hasattr(source, "__aiter__"):
        async for item in source:
            yield item
    else:
        for item in source:
            yield item


async def split_weight_chunks(
    weights: Any, bucket_size: int, meta_only: bool = False
) -> AsyncIterator[tuple[TensorMeta, torch.Tensor | None]]:
    """Cut each tensor of a weight stream into byte chunks of at most ``bucket_size``.

    Yields ``(TensorMeta, uint8 view of the chunk)`` (``None`` instead of the view with ``meta_only``).
    """
    if bucket_size <= 0:
        raise ValueError(f"split_weight_chunks: bucket_size must be > 0, got {bucket_size}")
    async for name, weight in ensure_async_iterator(weights):
        raw = weight.contiguous().view(-1).view(torch.uint8)
        for start in range(0, max(weight.nbytes, 1), bucket_size):
            size = min(bucket_size, weight.nbytes - start)
            meta = TensorMeta(
                name=name, shape=weight.shape, dtype=weight.dtype, chunk_offset=start, chunk_size=size, offset=None
            )
            yield meta, None if meta_only else raw[start : start + size]


async def merge_weight_chunks(chunks: Any, bucket_size: int) -> AsyncIterator[tuple[str, torch.Tensor]]:
    """Reassemble the output of ``split_weight_chunks`` (chunks of one tensor in order) into ``(name, tensor)``."""
    pending: tuple[str, torch.Tensor, torch.Tensor, int] | None = None  # name, tensor, its bytes, bytes filled
    async for meta, chunk in ensure_async_iterator(chunks):
        if chunk.dtype != torch.uint8:
            raise TypeError(f"merge_weight_chunks: chunk of {meta.name!r} must be uint8, got {chunk.dtype}")
        nbytes = meta.shape.numel() * meta.dtype.itemsize
        if nbytes <= bucket_size:  # travelled whole
            if pending is not None:
                raise ValueError(f"merge_weight_chunks: {pending[0]!r} is incomplete when {meta.name!r} starts")
            yield meta.name, chunk.view(meta.dtype).view(meta.shape)
            continue
        if pending is None:
            if meta.chunk_offset != 0:
                raise ValueError(f"merge_weight_chunks: {meta.name!r} starts at byte {meta.chunk_offset}, not 0")
            tensor = torch.empty(meta.shape, dtype=meta.dtype, device=chunk.device)
            pending = (meta.name, tensor, tensor.view(-1).view(torch.uint8), 0)
        name, tensor, raw, filled = pending
        if meta.name != name or meta.chunk_offset != filled:
            raise ValueError(
                f"merge_weight_chunks: expected {name!r} at byte {filled}, got {meta.name!r} at byte "
                f"{meta.chunk_offset}"
            )
        raw[meta.chunk_offset : meta.chunk_offset + meta.chunk_size] = chunk
        filled += meta.chunk_size
        pending = (name, tensor, raw, filled)
        if filled == nbytes:
            yield name, tensor
            pending = None
    if pending is not None:
        raise ValueError(f"merge_weight_chunks: the stream ended inside {pending[0]!r}")
