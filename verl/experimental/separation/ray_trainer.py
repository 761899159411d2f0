"""SeparateRayPPOTrainer: the PPO template of :class:`RayPPOTrainer` with the rollout on a pool of its own.

The trainer-side groups (actor, critic, ref, reward model) live on their pools as in the colocated trainer; the
rollout replicas live on ``Role.Rollout``'s pool (``rollout.nnodes x rollout.n_gpus_per_node``), and new weights
reach them through the checkpoint engine (``self.weight_sync``), which refuses to return unless every replica
reports the version and the trainer's checksum. How a batch is generated on those replicas is the subclass's
business: the one-step-off trainer overlaps it with training, the fully-async trainer reads it from a queue.
"""

from __future__ import annotations

from typing import Any

from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role

__all__ = ["SeparateRayPPOTrainer"]


class SeparateRayPPOTrainer(RayPPOTrainer):
    """PPO trainer whose rollout has its own resource pool. Subclasses implement ``_init_rollout(pool)`` (which
    must set ``self.replicas``) and generation (``_generate_sequences`` or ``_fit_generate``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.weight_sync: Any = None  # CheckpointEngineManager, built in init_workers
        self.replicas: list[Any] = []

    @property
    def checkpoint_manager(self) -> Any:
        """verl's name for the object that publishes weights to the rollout (``update_weights(version)``)."""
        return self.weight_sync

    def init_workers(self) -> None:
        """Reserve both pools, build the trainer workers and the rollout side (in parallel only when both pools
        are placement groups, so neither can take the other's slots), then check the replicas hold the trainer's
        weights."""
        from verl.experimental.separation.rollout_pool import (
            build_weight_sync,
            placement_guaranteed,
            run_parallel_or_ordered,
        )

        manager = self.resource_pool_manager
        manager.create_resource_pool()
        rollout_pool = manager.get_resource_pool(Role.Rollout)
        trainer_pool = manager.get_resource_pool(self.actor_role)
        for pool in (rollout_pool, trainer_pool):
            pool.get_placement_groups()
        parallel = placement_guaranteed(rollout_pool, trainer_pool)
        run_parallel_or_ordered(parallel, self._init_trainer_workers, lambda: self._init_rollout(rollout_pool))
        self.weight_sync = build_weight_sync(self.config, self.actor_rollout_wg, self.replicas)
        report = self.weight_sync.update_weights(int(self.weight_version))
        self.weight_checksums[int(self.weight_version)] = str(report.get("checksum"))

    def _init_rollout(self, pool: Any) -> None:
        """Start the rollout replicas on ``pool`` and whatever drives them; sets ``self.replicas``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _init_rollout(pool)")

    def _generate_sequences(self, gen_batch: DataProto) -> DataProto:
        raise NotImplementedError(f"{type(self).__name__} must implement _generate_sequences or _fit_generate")

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        raise NotImplementedError(f"{type(self).__name__} must implement _generate_validation to validate")

    def _push_weights(self, metrics: dict) -> None:
        """Publish the actor's weights as the next version through the checkpoint engine (every replica must report
        the version and the trainer's checksum, or ``WeightSyncError`` names the culprit)."""
        if self.weight_sync is None:
            raise RuntimeError(
                f"{type(self).__name__}: no weight_sync (CheckpointEngineManager) was set up in "
                "init_workers; the rollout would keep serving stale weights"
            )
        self.weight_version += 1
        report = self.weight_sync.update_weights(self.weight_version)
        self.weight_checksums[self.weight_version] = str(report.get("checksum"))
        metrics.update(report.get("metrics", {}))
        metrics["rollout/weight_version"] = self.weight_version
