"""Per-request generation on the engines that live inside the actor workers (hybrid engine).

In the colocated layout each actor-worker rank hosts a rollout engine (``HybridRollout``: the engine plus a private
event loop on a daemon thread). Agent loops need to send *one request at a time* to a chosen rank, many at once,
while the worker's other methods stay plain synchronous Ray calls.

:class:`HybridRolloutServerMixin` adds ``async rollout_generate(prompt_ids, sampling_params, request_id)``,
registered with ``Dispatch.DIRECT_ROLLOUT_METHOD`` (called on one rank's actor handle, never on the group). Having
an ``async def`` makes Ray run the worker as an asyncio actor: requests overlap on the actor's event loop, each
submitted to the engine's own loop thread, while the synchronous training methods still run one at a time on
that event loop, as before. :class:`WorkerRankReplica` is the caller's side: one rank as a rollout replica.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.single_controller.base import Dispatch, register
from verl.utils.async_utils import await_ray, wait_named
from verl.workers.rollout.base import TokenOutput

__all__ = ["ROLLOUT_GENERATE", "HybridRolloutServerMixin", "WorkerRankReplica", "rollout_method_name"]

ROLLOUT_GENERATE = "rollout_generate"


class HybridRolloutServerMixin:
    """Mixin for a worker whose ``self.rollout`` is a ``HybridRollout`` (``replica`` + ``loop``)."""

    rollout_request_timeout_s: float = 3600.0

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def rollout_generate(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                               request_id: str) -> TokenOutput:
        """Generate one request on this rank's engine (the ``RolloutServer.generate`` contract)."""
        rollout = getattr(self, "rollout", None)
        if rollout is None:
            raise RuntimeError(
                f"{type(self).__name__}.rollout_generate: this worker has no rollout engine (role without rollout, "
                "or init_model was not called)"
            )
        future = asyncio.run_coroutine_threadsafe(
            rollout.replica.generate(list(prompt_ids), dict(sampling_params), request_id), rollout.loop.loop
        )
        try:
            return await wait_named(asyncio.wrap_future(future), self.rollout_request_timeout_s,
                                    f"hybrid rollout request {request_id}")
        finally:
            if not future.done():
                future.cancel()  # the caller went away: the engine drops the row


def rollout_method_name(worker_group: Any) -> str:
    """The actor-side name of ``rollout_generate`` in ``worker_group`` (colocated groups prefix it with the role).

    Raises TypeError naming the group's role when its worker class lacks the mixin.
    """
    bound = getattr(worker_group, "_bound_methods", {}) or {}
    name = bound.get(ROLLOUT_GENERATE)
    if name is None:
        role = getattr(worker_group, "role", type(worker_group).__name__)
        raise TypeError(
            f"worker group {role!r} has no {ROLLOUT_GENERATE!r} method: its worker class must inherit "
            "verl.experimental.agent_loop.hybrid_server.HybridRolloutServerMixin for the agent loop to use its "
            "engines (hybrid mode), or give AgentLoopManager.create a rollout_resource_pool (standalone mode)"
        )
    return name


class WorkerRankReplica:
    """One rank of a hybrid worker group, seen as a rollout replica (picklable: it holds an actor handle)."""

    def __init__(self, handle: Any, method_name: str, rank: int, call_timeout_s: float = 3600.0):
        self.handle = handle
        self.method_name = method_name
        self.rank = rank
        self.call_timeout_s = call_timeout_s

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        ref = getattr(self.handle, self.method_name).remote(list(prompt_ids), dict(sampling_params), request_id)
        return await await_ray(ref, self.call_timeout_s, f"hybrid rollout rank {self.rank}: request {request_id}")

    def __repr__(self) -> str:
        return f"WorkerRankReplica(rank={self.rank}, method={self.method_name!r})"
