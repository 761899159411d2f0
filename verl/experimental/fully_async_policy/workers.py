"""Trainer-side policy worker of the async recipes: the FSDP actor plus the checkpoint engine's ``send_weights``.

The rollout lives on its own pool, so the actor process has no engine; new weights leave through the checkpoint
engine (``ray`` / ``collective`` backends), whose worker-side entry point every rank must run.
"""

from __future__ import annotations

from typing import Any

from verl.checkpoint_engine import send_weights
from verl.single_controller.base import Dispatch, register
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
