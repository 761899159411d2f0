"""Pools and worker classes of a trainer whose rollout has its own pool, under verl's names.

The async recipes build the same thing through ``build_async_role_worker_mapping``; these two functions are the
pieces a recipe of its own calls: ``create_role_worker_mapping(config)`` for the worker classes and
``create_resource_pool_manager(config, roles)`` for the pools of the roles it uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from verl.trainer.ppo.utils import Role

__all__ = ["TRAINING_ROLES", "create_resource_pool_manager", "create_role_worker_mapping"]

TRAINING_ROLES = (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef, Role.Critic, Role.RefPolicy, Role.RewardModel)


def create_resource_pool_manager(config: Any, roles: Iterable[Role]) -> Any:
    """Training roles share the trainer pool (``trainer.nnodes x trainer.n_gpus_per_node``); ``Role.Rollout`` gets
    the rollout pool (``rollout.nnodes x rollout.n_gpus_per_node``, both must be >= 1)."""
    from verl.experimental.separation.rollout_pool import ROLLOUT_POOL, rollout_pool_spec
    from verl.experimental.separation.task_runner import TRAINER_POOL
    from verl.single_controller.ray import ResourcePoolManager

    roles = list(roles)
    spec: dict[str, list[int]] = {}
    mapping: dict[Role, str] = {}
    training = [role for role in roles if role in TRAINING_ROLES]
    if training:
        nnodes, per_node = int(config.trainer.nnodes), int(config.trainer.n_gpus_per_node)
        if nnodes < 1 or per_node < 1:
            raise ValueError(f"trainer.nnodes ({nnodes}) and trainer.n_gpus_per_node ({per_node}) must be >= 1")
        spec[TRAINER_POOL] = [per_node] * nnodes
        mapping.update({role: TRAINER_POOL for role in training})
    if Role.Rollout in roles:
        spec[ROLLOUT_POOL] = rollout_pool_spec(config.rollout)
        mapping[Role.Rollout] = ROLLOUT_POOL
    unknown = [str(role) for role in roles if role not in mapping]
    if unknown:
        raise ValueError(f"create_resource_pool_manager: no pool for role(s) {unknown}")
    return ResourcePoolManager(resource_pool_spec=spec, mapping=mapping, device=str(config.trainer.device))


def create_role_worker_mapping(config: Any) -> tuple[dict[Role, type], type]:
    """The worker class of every training role the config needs, and the worker-group class."""
    from verl.experimental.separation.task_runner import build_async_role_worker_mapping
    from verl.single_controller.ray import RayWorkerGroup

    mapping, _pools, _spec = build_async_role_worker_mapping(config)
    return mapping, RayWorkerGroup
