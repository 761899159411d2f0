"""Trainer-side policy worker of a separated rollout (standalone sync, one-step-off, fully async): the FSDP actor
plus the checkpoint engine's ``send_weights``.

The rollout lives on its own pool, so the actor process has no engine; new weights leave through the checkpoint
engine (``ray`` / ``collective`` backends), whose worker-side entry point every rank must run. CPU copies of the
actor (verl's ``save_model_to_cpu`` / ``restore_model_from_cpu`` / ``clear_cpu_model``) let the trainer take old
log-probs under the weights a sample was generated with after it has updated the actor since.
"""

from __future__ import annotations

from typing import Any

from verl.checkpoint_engine import send_weights
from verl.single_controller.base import Dispatch, register
from verl.workers.fsdp.cpu_snapshot import restore_from_cpu, snapshot_to_cpu
from verl.workers.fsdp_workers import ActorRolloutRefWorker

__all__ = ["DetachActorWorker"]


class DetachActorWorker(ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` (role ``actor`` or ``ref``) that can publish its weights to standalone replicas."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def send_weights(self, request: Any) -> dict[str, Any] | None:
        module = self._require("actor_module_fsdp", "send_weights")
        self._load_actor()
        try:
            return send_weights(module, request, rank=self.rank)
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_model_to_cpu(self, n: int) -> None:
        """Keep this rank's shard of the actor's weights on CPU under key ``n`` (the async trainer uses versions)."""
        module = self._require("actor_module_fsdp", "save_model_to_cpu")
        self._load_actor()
        try:
            self._cpu_models()[n] = snapshot_to_cpu(module)
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def restore_model_from_cpu(self, n: int) -> None:
        """Load the weights saved under ``n`` into the actor (the optimizer state is left as it is)."""
        saved = self._cpu_models().get(n)
        if saved is None:
            raise KeyError(
                f"restore_model_from_cpu({n!r}): no CPU copy under that key; saved: {sorted(self._cpu_models())}"
            )
        module = self._require("actor_module_fsdp", "restore_model_from_cpu")
        self._load_actor()
        try:
            restore_from_cpu(module, saved)
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def clear_cpu_model(self, n: int) -> None:
        """Drop the CPU copy saved under ``n`` (no-op when there is none)."""
        self._cpu_models().pop(n, None)

    def _cpu_models(self) -> dict[int, dict[str, Any]]:
        if not hasattr(self, "cpu_saved_models"):
            self.cpu_saved_models: dict[int, dict[str, Any]] = {}
        return self.cpu_saved_models
