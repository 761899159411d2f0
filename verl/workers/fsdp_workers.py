"""FSDP2 Ray workers of the PPO dataflow (verl's import path): the policy, the value model and the reward model.

``ActorRolloutRefWorker(config, role)`` with role actor | rollout | ref | actor_rollout | actor_rollout_ref,
``CriticWorker(config)`` and ``RewardModelWorker(config)``. They drive torch.distributed over gloo on CPU and nccl
on CUDA, with the process-group environment RayWorkerGroup sets. The building blocks live in
:mod:`verl.workers.fsdp`.

verl's module also exposed the helpers its workers were written with, and recipes import them from here:
``create_device_mesh`` / ``get_sharding_strategy`` (:mod:`verl.workers.engine.fsdp.utils`), ``device_name``,
``get_vl_model_vision_tower``, ``Worker``, ``DictConfig``, ``copy_to_local`` (:mod:`verl.utils.fs`) and
``hf_tokenizer`` (:mod:`verl.utils.tokenizer`).
"""

from __future__ import annotations

from omegaconf import DictConfig
from torch import nn

from verl.single_controller.base import Worker
from verl.utils.device import get_device_name
from verl.utils.fs import copy_to_local
from verl.utils.tokenizer import hf_tokenizer
from verl.workers.engine.fsdp.utils import create_device_mesh, get_sharding_strategy
from verl.workers.fsdp.actor_worker import ROLES, ActorRolloutRefWorker
from verl.workers.fsdp.critic_worker import CriticWorker
from verl.workers.reward_model.worker import RewardModelWorker

__all__ = [
    "ROLES",
    "ActorRolloutRefWorker",
    "AsyncActorRolloutRefWorker",
    "CriticWorker",
    "DictConfig",
    "RewardModelWorker",
    "Worker",
    "copy_to_local",
    "create_device_mesh",
    "device_name",
    "get_sharding_strategy",
    "get_vl_model_vision_tower",
    "hf_tokenizer",
]

# The hybrid worker already serves its rollout engine asynchronously inside the process; verl recipes import this
# name for the async rollout mode.
AsyncActorRolloutRefWorker = ActorRolloutRefWorker

device_name: str = get_device_name()


def get_vl_model_vision_tower(vl_model_instance: nn.Module) -> nn.Module | None:
    """The vision encoder of a vision-language model (``model.visual`` in transformers >= 4.52, ``visual`` before),
    or ``None`` for a text-only model."""
    inner = getattr(vl_model_instance, "model", None)
    if inner is not None and getattr(inner, "visual", None) is not None:
        return inner.visual
    return getattr(vl_model_instance, "visual", None)
