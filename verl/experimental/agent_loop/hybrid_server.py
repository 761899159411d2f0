"""Per-request generation on the engines that live inside the actor workers (hybrid engine).

In the colocated layout each actor-worker rank hosts a rollout engine (``HybridRollout``: the engine plus a private
event loop on a daemon thread). Agent loops need to send *one request at a time* to a chosen rank, many at once,
while the worker's other methods stay plain synchronous Ray calls.

:class:`HybridRolloutServerMixin` adds ``async rollout_generate(prompt_ids, sampling_params, request_id)``,
registered with ``Dispatch.DIRECT_ROLLOUT_METHOD`` (called on one rank's actor handle, never on the group). Having
an ``async def`` makes Ray run the worker as an asyncio actor: requests overlap on the actor's event loop, each
submitted to the engine's own loop thread, while the synchronous training methods still run one at a time on
that event loop, as before. :class:`WorkerRankReplica` is the caller's side: one rank as a rollout replica.

The caller coalesces (:mod:`verl.workers.rollout.request_batching`): requests made to one rank in the same turn of
its event loop travel together in one ``rollout_generate_batch`` call, packed into one ``bytes`` each way, and reach
the engine's admission queue together, where they decode as one batch.
"""

from __future__ import annotations

import collections
from typing import Any

from verl.single_controller.base import Dispatch, register
from verl.utils.async_utils import await_ray
from verl.workers.rollout.base import TokenOutput
from verl.workers.rollout.request_batching import CURRENT_BATCH_GROUP, Request, RequestCoalescer, call_batch_method

__all__ = [
    "CURRENT_BATCH_GROUP",
    "ROLLOUT_GENERATE",
    "ROLLOUT_GENERATE_BATCH",
    "HybridRolloutServerMixin",
    "WorkerRankReplica",
    "rollout_method_name",
]

ROLLOUT_GENERATE = "rollout_generate"
ROLLOUT_GENERATE_BATCH = "rollout_generate_batch"


class HybridRolloutServerMixin:
    """Mixin for a worker whose ``self.rollout`` is a ``HybridRollout`` (``replica`` + ``loop``).

    ``ActorRolloutRefWorker`` has these methods itself; the mixin gives them to other worker classes.
    """

    def _hybrid_rollout(self, method: str) -> Any:
        rollout = getattr(self, "rollout", None)
        if rollout is None:
            raise RuntimeError(
                f"{type(self).__name__}.{method}: this worker has no rollout engine (role without rollout, "
                "or init_model was not called)"
            )
        return rollout

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def rollout_generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> TokenOutput:
        """Generate one request on this rank's engine (the ``RolloutServer.generate`` contract)."""
        rollout = self._hybrid_rollout(ROLLOUT_GENERATE)
        return await rollout.run_async(
            rollout.replica.generate(list(prompt_ids), dict(sampling_params), request_id),
            f"hybrid rollout request {request_id}",
        )

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def rollout_generate_batch(
        self, requests: list[tuple[list[int], dict[str, Any], str]] | bytes, batch_group: Any = None
    ) -> list[Any] | bytes:
        """Many requests in one call: per request its ``TokenOutput`` or the exception it raised."""
        return await self._hybrid_rollout(ROLLOUT_GENERATE_BATCH).serve_requests(requests, batch_group)


def _bound_name(worker_group: Any, method: str) -> str | None:
    bound = getattr(worker_group, "_bound_methods", {}) or {}
    return bound.get(method)


def rollout_method_name(worker_group: Any) -> str:
    """The actor-side name of ``rollout_generate`` in ``worker_group`` (colocated groups prefix it with the role).

    Raises TypeError naming the group's role when its worker class lacks the mixin.
    """
    name = _bound_name(worker_group, ROLLOUT_GENERATE)
    if name is None:
        role = getattr(worker_group, "role", type(worker_group).__name__)
        raise TypeError(
            f"worker group {role!r} has no {ROLLOUT_GENERATE!r} method: its worker class must inherit "
            "verl.experimental.agent_loop.hybrid_server.HybridRolloutServerMixin for the agent loop to use its "
            "engines (hybrid mode), or give AgentLoopManager.create a rollout_resource_pool (standalone mode)"
        )
    return name


def rollout_batch_method_name(worker_group: Any) -> str | None:
    """The actor-side name of ``rollout_generate_batch``, or None when the worker class has only single requests."""
    return _bound_name(worker_group, ROLLOUT_GENERATE_BATCH)


class WorkerRankReplica:
    """One rank of a hybrid worker group, seen as a rollout replica (picklable: it holds an actor handle).

    With ``batch_method_name`` the requests made in one turn of the caller's event loop are sent together in one
    Ray call; each caller still gets its own result or exception. Without it, one Ray call per request.
    """

    def __init__(
        self,
        handle: Any,
        method_name: str,
        rank: int,
        call_timeout_s: float = 3600.0,
        batch_method_name: str | None = None,
    ):
        self.handle = handle
        self.method_name = method_name
        self.batch_method_name = batch_method_name
        self.rank = rank
        self.call_timeout_s = call_timeout_s
        self._reset_pending()

    def _reset_pending(self) -> None:
        self._coalescer = RequestCoalescer()

    @property
    def batch_sizes(self) -> collections.deque[int]:
        """Requests per recent batch call."""
        return self._coalescer.batch_sizes

    def __getstate__(self) -> dict[str, Any]:
        return {
            key: self.__dict__[key] for key in ("handle", "method_name", "batch_method_name", "rank", "call_timeout_s")
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_pending()

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        if self.batch_method_name is None:
            ref = getattr(self.handle, self.method_name).remote(list(prompt_ids), dict(sampling_params), request_id)
            return await await_ray(ref, self.call_timeout_s, f"hybrid rollout rank {self.rank}: request {request_id}")
        return await self._coalescer.submit((list(prompt_ids), dict(sampling_params), request_id), self._send_batch)

    async def _send_batch(self, requests: list[Request]) -> list[Any]:
        return await call_batch_method(
            getattr(self.handle, self.batch_method_name),
            requests,
            self.call_timeout_s,
            f"hybrid rollout rank {self.rank}",
        )

    def __repr__(self) -> str:
        return f"WorkerRankReplica(rank={self.rank}, method={self.batch_method_name or self.method_name!r})"
