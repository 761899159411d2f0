"""``trainer.checkpoint_manager`` of the colocated (hybrid-engine) trainer, with verl's method names.

verl's ``fit()`` loops, and the recipes that copy them, drive the rollout replicas through
``self.checkpoint_manager``: ``sleep_replicas()`` after generating (frees the engines' memory for training) and
``update_weights(global_steps)`` after the actor update (wakes the replicas and pushes the new weights). Here the
engines live inside the actor workers, so the calls go to the actor worker group; each push is a new weight
version that every engine must report back, exactly as the trainer's own ``_fit_update_weights`` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ColocatedCheckpointManager"]


class ColocatedCheckpointManager:
    """Weight pushes and sleep/wake of the engines inside ``trainer.actor_rollout_wg``.

    ``global_steps`` passed to :meth:`update_weights` is verl's label for the push; the version the engines
    report is the trainer's own counter (``trainer.weight_version``), which also survives resume.
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.asleep = False

    @property
    def actor_wg(self) -> Any:
        return self.trainer.actor_rollout_wg

    def update_weights(self, global_steps: int | None = None) -> dict[str, Any]:
        """Wake the engines if asleep and push the actor's weights as the next version; returns
        ``{"version": v, "global_steps": global_steps}``."""
        self.wake_up_replicas()
        metrics: dict[str, Any] = {}
        self.trainer._push_weights(metrics)
        return {"version": self.trainer.weight_version, "global_steps": global_steps}

    def sleep_replicas(self) -> None:
        """Free the engines' KV cache (and, on an accelerator, their weights) while the trainer uses the device."""
        if not self.asleep:
            self.actor_wg.sleep_rollout()
            self.asleep = True

    def wake_up_replicas(self) -> None:
        if self.asleep:
            self.actor_wg.wake_up_rollout()
            self.asleep = False

    def ensure_awake(self) -> None:
        """Called before every generation: a ``fit()`` that slept the engines and skipped ``update_weights`` (a
        critic-warmup step) would otherwise wait on closed engines."""
        self.wake_up_replicas()

    def abort_replicas(self, reject_request: bool = False) -> None:
        raise NotImplementedError(
            "checkpoint_manager.abort_replicas: the colocated trainer generates one batch at a time, so no request "
            "is in flight between stages; the async trainers' checkpoint manager aborts and resumes requests"
        )

    def resume_generation_replicas(self) -> None:
        self.wake_up_replicas()
