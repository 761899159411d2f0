"""``trainer.checkpoint_manager`` of the trainers whose rollout has a pool of its own, with verl's method names.

verl's loops call ``self.checkpoint_manager.update_weights(self.global_steps)`` to publish the actor to the rollout.
Here the number a replica reports is the trainer's own weight version (checksums, policy snapshots and resume key on
it), so the call publishes the *next* version through the trainer (``_update_rollout_weights``), which also does
what the trainer needs around a publish: the one-step-off trainer waits for the generation in flight, the
fully-async one pauses its rollouter. ``global_steps`` is only verl's label for the call.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.utils.ray_utils import auto_await

__all__ = ["SeparateCheckpointManager"]


class SeparateCheckpointManager:
    """Publishes ``trainer``'s actor to its standalone replicas through ``engine`` (a ``CheckpointEngineManager``).

    Other attributes (``replicas``, ``backend``, ``last_metrics``, ``add_replicas`` ...) are the engine's own.
    """

    def __init__(self, trainer: Any, engine: Any) -> None:
        self.trainer = trainer
        self.engine = engine

    def __getattr__(self, name: str) -> Any:
        if name in ("trainer", "engine"):  # not set yet (unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.engine, name)

    @auto_await
    async def update_weights(self, global_steps: int | None = None) -> dict[str, Any]:
        """Publish the actor's weights as the trainer's next version; returns the publish's metrics
        (``rollout/weight_version``, ``timing_s/update_weights`` ...), which verl's loops merge into the step's."""
        metrics: dict[str, Any] = {}
        await asyncio.to_thread(self.trainer._update_rollout_weights, metrics)
        return metrics

    @auto_await
    async def sleep_replicas(self) -> None:
        """Returns at once: the replicas' memory is on the rollout pool, which training never uses, so freeing it
        would only slow the next generation down."""

    @auto_await
    async def wake_up_replicas(self) -> None:
        """Returns at once: the replicas are never put to sleep (see :meth:`sleep_replicas`)."""

    def abort_replicas(self, reject_request: bool = False) -> None:
        raise NotImplementedError(
            "checkpoint_manager.abort_replicas: a trainer with its own rollout pool pauses and resumes its rollout "
            "itself around each publish (the fully-async trainer through its rollouter's pause/resume); publish "
            "with checkpoint_manager.update_weights()"
        )

    def resume_generation_replicas(self) -> None:
        raise NotImplementedError(
            "checkpoint_manager.resume_generation_replicas: the trainer resumes its rollout itself after each "
            "publish (see abort_replicas)"
        )
