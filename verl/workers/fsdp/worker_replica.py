"""WorkerRolloutReplica: the rollout engine inside a hybrid actor worker, seen from another process.

Agent loops and the async trainers program against ``RolloutReplica``. In the colocated layout the engine lives in
each ActorRolloutRefWorker process, so the replica is that worker's Ray actor handle: every call is a remote call to
the worker's async token-level methods, bounded by a timeout that names the worker and the method.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import torch

from verl.workers.rollout.base import TokenOutput
from verl.workers.rollout.replica import RolloutReplica

__all__ = ["WorkerRolloutReplica", "replicas_of"]


class WorkerRolloutReplica(RolloutReplica):
    """Forward the ``RolloutServer`` contract to one ActorRolloutRefWorker actor."""

    def __init__(self, worker: Any, name: str = "worker", call_timeout_s: float = 600.0) -> None:
        self.worker = worker
        self.name = name
        self.call_timeout_s = call_timeout_s

    async def _call(self, method: str, *args: Any) -> Any:
        ref = getattr(self.worker, method).remote(*args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout=self.call_timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"rollout replica {self.name}: {method} got no answer within {self.call_timeout_s}s"
            ) from None

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        return await self._call("rollout_generate", list(prompt_ids), dict(sampling_params or {}), request_id)

    async def abort_all(self) -> None:
        await self._call("abort_all")

    async def resume(self) -> None:
        await self._call("resume")

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        items = named_tensors.items() if isinstance(named_tensors, dict) else named_tensors
        return await self._call("update_weights", [(n, t.detach().cpu()) for n, t in items], version)

    async def sleep(self) -> None:
        await self._call("sleep")

    async def wake_up(self) -> None:
        await self._call("wake_up")

    async def get_version(self) -> int:
        return await self._call("get_version")


def replicas_of(worker_group: Any, call_timeout_s: float = 600.0) -> list[WorkerRolloutReplica]:
    """One replica per rank of a hybrid actor/rollout worker group (rollout.tensor_model_parallel_size == 1)."""
    names = getattr(worker_group, "worker_names", None) or [f"rank{i}" for i in range(len(worker_group.workers))]
    return [
        WorkerRolloutReplica(w, name=str(n), call_timeout_s=call_timeout_s) for w, n in zip(worker_group.workers, names)
    ]
