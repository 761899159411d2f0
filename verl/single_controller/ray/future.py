"""DataProtoFuture for non-blocking worker-group calls: bounded wait, errors naming the worker, padding removed."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from verl.protocol import DataProto, DataProtoFuture
from verl.single_controller.base.dispatch import concat_batches, unpad_batch
from verl.single_controller.ray.errors import DEFAULT_CALL_TIMEOUT_S, wait_for_workers


def concat_and_unpad(outputs: list[Any], pad_size: int = 0, ranks: list[int] | None = None) -> Any:
    """Merge per-rank outputs (DataProto or TensorDict) and strip the rows dispatch added to make the batch
    divisible."""
    return unpad_batch(concat_batches(outputs, ranks), pad_size)


def _take_chunk(data: DataProto, chunks: int, index: int, inner=None) -> DataProto:
    if inner is not None:
        data = inner(data)
    # a future's length is unknown at dispatch, so its DataProto is not padded: parts may differ by one row
    return (data.chunk_balanced(chunks) if isinstance(data, DataProto) else data.chunk(chunks))[index]


@dataclass
class RayDataProtoFuture(DataProtoFuture):
    """Result of a ``blocking=False`` DataProto call; ``get()`` waits at most ``timeout_s`` and raises WorkerError
    naming the worker on failure. Can be passed straight into another group call (workers resolve it)."""

    role: str = "worker"
    method: str = "?"
    ranks: list[int] = field(default_factory=list)
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    actor_ids: list[str] | None = None
    worker_names: list[str] | None = None

    def chunk(self, chunks: int) -> list[DataProtoFuture]:  # RayDataProtoFutures; list is invariant
        if not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks must be a positive int, got {chunks!r}")
        return [
            dataclasses.replace(
                self, dispatch_fn=functools.partial(_take_chunk, chunks=chunks, index=i, inner=self.dispatch_fn)
            )
            for i in range(chunks)
        ]

    def get(self, timeout: float | None = None) -> Any:
        """The merged output (DataProto, or TensorDict when every rank returned one)."""
        ranks = self.ranks or list(range(len(self.futures)))
        outputs = wait_for_workers(
            list(self.futures),
            ranks=ranks,
            method=self.method,
            role=self.role,
            timeout_s=timeout if timeout is not None else self.timeout_s,
            actor_ids=self.actor_ids,
            worker_names=self.worker_names,
        )
        try:
            result = self.collect_fn(outputs)
        except TypeError as err:
            raise TypeError(f"{self.role} {self.method}(): {err}") from None
        return self.dispatch_fn(result) if self.dispatch_fn is not None else result
