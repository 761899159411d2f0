"""verl's ``verl.workers.rollout.llm_server``: the rollout replicas of a run and the clients that route over them.

- ``LLMServerClient``: routes token-level ``generate(request_id, prompt_ids=, sampling_params=)`` calls over the
  replicas, sticky per request id and least loaded otherwise; this package's
  :class:`~verl.experimental.agent_loop.server_manager.AsyncLLMServerManager`.
- ``FullyAsyncLLMServerClient``: the client of fully-async training, which continues a request a weight sync
  aborted once the new weights are in; this package's
  :class:`~verl.experimental.fully_async_policy.server_manager.PartialRolloutServerManager`.
- ``LLMServerManager``: finds or starts the replicas (the engines inside a hybrid actor worker group, replicas
  given by the caller, or standalone replica actors) and hands out clients over them, e.g. as the ``llm_client``
  of :meth:`AgentLoopManager.create <verl.experimental.agent_loop.manager.AgentLoopManager.create>`.

The replicas here are Ray actors or in-process engines reached by token-level calls, not HTTP servers, so there
are no server addresses to list.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.fully_async_policy.server_manager import PartialRolloutServerManager
from verl.utils.async_utils import run_blocking

__all__ = ["FullyAsyncLLMServerClient", "LLMServerClient", "LLMServerManager"]

LLMServerClient = AsyncLLMServerManager
FullyAsyncLLMServerClient = PartialRolloutServerManager


class LLMServerManager:
    """The rollout replicas of a run.

    Args:
        config: the trainer config (its ``rollout`` and ``model`` groups are read when replicas are started).
        worker_group: hybrid layout, the actor workers whose ranks host the engines.
        rollout_resource_pool: standalone layout, where to place the replica actors.
        start_rank: accepted for verl's signature; replicas here are not named actors, so it has no effect.
        load_balancer_cls: the client class :meth:`get_client` builds by default (an ``AsyncLLMServerManager``
            subclass; verl passes its routing actor class here).
        replicas: replica handles to use as they are.
    """

    def __init__(
        self,
        config: Any = None,
        worker_group: Any = None,
        rollout_resource_pool: Any = None,
        start_rank: int = 0,
        load_balancer_cls: type | None = None,
        *,
        replicas: list[Any] | None = None,
    ) -> None:
        if load_balancer_cls is not None and not (
            isinstance(load_balancer_cls, type) and issubclass(load_balancer_cls, AsyncLLMServerManager)
        ):
            raise TypeError(
                f"LLMServerManager: load_balancer_cls must subclass AsyncLLMServerManager, got {load_balancer_cls!r}"
            )
        self.config = config
        self.worker_group = worker_group
        self.rollout_resource_pool = rollout_resource_pool
        self.start_rank = int(start_rank)
        self.client_cls: type[AsyncLLMServerManager] = load_balancer_cls or AsyncLLMServerManager
        self.rollout_replicas: list[Any] = list(replicas) if replicas is not None else []
        self.owned_replicas: list[Any] = []

    @classmethod
    async def create(cls, *args: Any, **kwargs: Any) -> LLMServerManager:
        """Build the manager and find or start its replicas (see :meth:`start_replicas`)."""
        manager = cls(*args, **kwargs)
        await manager.start_replicas()
        return manager

    @classmethod
    def create_blocking(cls, *args: Any, **kwargs: Any) -> LLMServerManager:
        """:meth:`create` for synchronous callers."""
        return run_blocking(cls.create(*args, **kwargs), "LLMServerManager.create_blocking")

    @classmethod
    async def create_empty(cls, *args: Any, **kwargs: Any) -> LLMServerManager:
        """A manager without replicas (add them with :meth:`add_replicas`)."""
        kwargs.pop("replicas", None)
        return cls(*args, **kwargs)

    async def start_replicas(self) -> list[Any]:
        """Replicas given to the constructor, else one per rank of ``worker_group``, else standalone replica actors
        started from ``config`` (on ``rollout_resource_pool`` or ``rollout.nnodes x n_gpus_per_node`` of them)."""
        if self.rollout_replicas:
            return self.rollout_replicas
        from verl.experimental.agent_loop.manager import AgentLoopManager
        from verl.workers.rollout.replica import worker_rank_replicas

        if self.worker_group is not None:
            self.rollout_replicas = worker_rank_replicas(self.worker_group)
        else:
            if self.config is None:
                raise ValueError("LLMServerManager.start_replicas: give replicas, a worker_group or a config")
            self.owned_replicas = await AgentLoopManager._start_standalone_replicas(
                self.config, self.rollout_resource_pool, None
            )
            self.rollout_replicas = list(self.owned_replicas)
        return self.rollout_replicas

    def add_replicas(self, replicas: list[Any]) -> None:
        """More replicas for clients created from now on."""
        self.rollout_replicas.extend(replicas)

    def get_replicas(self) -> list[Any]:
        return list(self.rollout_replicas)

    def get_client(self, client_cls: type[AsyncLLMServerManager] | None = None, **kwargs: Any) -> AsyncLLMServerManager:
        """A client routing over the current replicas (``client_cls`` default: the manager's client class)."""
        if not self.rollout_replicas:
            raise RuntimeError("LLMServerManager.get_client: no replicas (call create / start_replicas first)")
        return (client_cls or self.client_cls)(self.rollout_replicas, **kwargs)

    def shutdown(self) -> None:
        """Stop the replica actors this manager started (not given replicas, not a hybrid worker group)."""
        for replica in self.owned_replicas:
            kill = getattr(replica, "kill", None)
            if callable(kill):
                kill()
        self.owned_replicas = []
