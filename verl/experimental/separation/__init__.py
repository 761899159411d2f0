"""Trainers whose rollout runs on a resource pool of its own (verl's ``separation`` package), and what the
synchronous standalone-rollout trainer, the one-step-off trainer and the fully-async recipe share:

- :mod:`.engine_workers`: ``DetachActorWorker``, the actor that sends its weights to standalone replicas;
- :mod:`.rollout_pool`: the rollout pool, its replicas, the in-process agent-loop worker and the weight sync;
- :mod:`.task_runner`: ``run_async_training`` and the task-runner actor of both async recipes;
- :mod:`.entry`: their command line.
"""

from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

__all__ = ["SeparateRayPPOTrainer"]
