"""verl's ``main_ppo_v0`` module: the task runner recipes subclass (``BaseTaskRunner``) and the Ray actor class
that runs the PPO trainer (``TaskRunner``).

``BaseTaskRunner`` is :class:`verl.trainer.ppo.task_runner.TaskRunner`: its building steps
(``add_actor_rollout_worker``, ``add_critic_worker``, ``add_reward_model_resource_pool``,
``add_teacher_model_resource_pool``, ``add_ref_policy_worker``, ``init_resource_pool_mgr``) fill
``role_worker_mapping`` and ``mapping`` as verl's do, and its ``run(config)`` trains, so a recipe that overrides
``run`` builds its own trainer from the same steps. ``TaskRunner`` is that class as a Ray actor class, for
``TaskRunner.remote()`` or ``run_ppo(config, task_runner_class=TaskRunner)``.
"""

from __future__ import annotations

import ray

from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.task_runner import TASK_RUNNER_CPUS, run_ppo
from verl.trainer.ppo.task_runner import TaskRunner as BaseTaskRunner
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
from verl.utils.config import validate_config

__all__ = [
    "BaseTaskRunner",
    "RayPPOTrainer",
    "TaskRunner",
    "create_rl_dataset",
    "create_rl_sampler",
    "need_critic",
    "need_reference_policy",
    "run_ppo",
    "validate_config",
]

TaskRunner = ray.remote(num_cpus=TASK_RUNNER_CPUS)(BaseTaskRunner)
