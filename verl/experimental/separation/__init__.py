"""Trainers whose rollout runs on a resource pool of its own (verl's ``separation`` package), and what the
synchronous standalone-rollout trainer, the one-step-off trainer and the fully-async recipe share:

- :mod:`.engine_workers`: ``DetachActorWorker``, the actor that sends its weights to standalone replicas;
- :mod:`.rollout_pool`: the rollout pool, its replicas, the in-process agent-loop worker and the weight sync;
- :mod:`.checkpoint_manager`: ``SeparateCheckpointManager``, verl's ``trainer.checkpoint_manager`` over that sync;
- :mod:`.task_runner`: ``run_async_training`` and ``AsyncTaskRunner``, main_ppo's task runner with a recipe's trainer;
- :mod:`.entry`: their entry point, main_ppo's command line with the recipe's config and training function.

The trainer loads on first access: the recipes' driver only composes the config and starts Ray, and importing the
trainer (torch, tensordict) there held up Ray's start by seconds.
"""

from typing import TYPE_CHECKING

from verl.utils.import_utils import lazy_exports

if TYPE_CHECKING:
    from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

__all__ = ["SeparateRayPPOTrainer"]

__getattr__ = lazy_exports(__name__, {"SeparateRayPPOTrainer": "verl.experimental.separation.ray_trainer"})
