"""FSDP2 Ray workers of the PPO dataflow (verl's import path): the policy and the value model.

``ActorRolloutRefWorker(config, role)`` with role actor | rollout | ref | actor_rollout | actor_rollout_ref, and
``CriticWorker(config)``. Both drive torch.distributed over gloo on CPU and nccl on CUDA, with the process-group
environment RayWorkerGroup sets. The building blocks live in :mod:`verl.workers.fsdp`.
"""

from verl.workers.fsdp.actor_worker import ROLES, ActorRolloutRefWorker
from verl.workers.fsdp.critic_worker import CriticWorker

# The hybrid worker already serves its rollout engine asynchronously inside the process; verl recipes import this
# name for the async rollout mode.
AsyncActorRolloutRefWorker = ActorRolloutRefWorker

__all__ = ["ROLES", "ActorRolloutRefWorker", "AsyncActorRolloutRefWorker", "CriticWorker"]
