"""`run_ppo(config)`: start or join Ray, then build and run the trainer inside a `TaskRunner` actor.

The trainer runs in a Ray actor rather than the driver so that a cluster's head node does not need the
driver's environment, and so that the driver process stays free to report failures.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf

from verl.trainer.ppo.roles import Role

logger = logging.getLogger(__name__)

TASK_RUNNER_CPUS = 0.1


def _ray_init_kwargs(config: DictConfig) -> dict[str, Any]:
    os.environ.setdefault("RAY_worker_niceness", "0")  # Ray's default 15 starves workers on a busy CPU (bench/)
    ray_init = OmegaConf.to_container(config.get("ray_kwargs", {}).get("ray_init", {}) or {}, resolve=True)
    kwargs = {key: value for key, value in ray_init.items() if value is not None}
    env_vars = {"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "WARN"}
    runtime_env = kwargs.setdefault("runtime_env", {})
    runtime_env.setdefault("env_vars", {}).update({k: v for k, v in env_vars.items() if k not in runtime_env})
    if os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = os.environ["RAY_ADDRESS"]
        kwargs.pop("num_cpus", None)
        kwargs.pop("num_gpus", None)
    return kwargs


def build_role_worker_mapping(config: DictConfig) -> tuple[dict[Role, type], dict[Role, str], dict[str, list[int]]]:
    """Worker class per role, pool per role, and processes per node of each pool."""
    from verl.trainer.ppo.ray_trainer import need_critic
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    strategy = str(config.actor.get("strategy", "fsdp"))
    if strategy not in ("fsdp", "fsdp2"):
        raise ValueError(f"actor.strategy={strategy!r} is not available; supported: fsdp, fsdp2")
    trainer = config.trainer
    pool_spec = {"global_pool": [int(trainer.n_gpus_per_node)] * int(trainer.nnodes)}
    mapping: dict[Role, type] = {Role.ActorRollout: ActorRolloutRefWorker}
    pools: dict[Role, str] = {Role.ActorRollout: "global_pool"}
    if need_critic(config):
        mapping[Role.Critic] = CriticWorker
        pools[Role.Critic] = "global_pool"
    if config.reward.reward_model.get("enable", False):
        from verl.workers.reward_model import RewardModelWorker

        mapping[Role.RewardModel] = RewardModelWorker
        pools[Role.RewardModel] = "global_pool"
    return mapping, pools, pool_spec


@ray.remote(num_cpus=TASK_RUNNER_CPUS)
class TaskRunner:
    """Builds tokenizer, data sets, reward functions, resource pools and the trainer, then trains."""

    def run(self, config_container: dict) -> str:
        from verl.single_controller.ray import ResourcePoolManager
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.trainer.ppo.reward import load_reward_manager
        from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

        config = OmegaConf.create(config_container)
        model_path = resolve_model_path(config.model)
        tokenizer = load_tokenizer(config.model, model_path)
        mapping, pools, pool_spec = build_role_worker_mapping(config)
        resource_pool_manager = ResourcePoolManager(
            resource_pool_spec=pool_spec, mapping=pools, device=str(config.trainer.get("device", "auto"))
        )
        reward_fn = load_reward_manager(config, tokenizer, num_examine=0)
        val_reward_fn = load_reward_manager(config, tokenizer, num_examine=1)
        trainer = RayPPOTrainer(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=mapping,
            resource_pool_manager=resource_pool_manager,
            reward_fn=reward_fn,
            val_reward_fn=val_reward_fn,
        )
        try:
            trainer.init_workers()
            trainer.fit()
        finally:
            resource_pool_manager.release_all()
        return str(config.trainer.default_local_dir)


def run_ppo(config: DictConfig) -> str:
    """Train with `config` (a resolved DictConfig); returns the run folder (`trainer.default_local_dir`)."""
    if not ray.is_initialized():
        ray.init(**_ray_init_kwargs(config))
    container = OmegaConf.to_container(config, resolve=True)
    runner = TaskRunner.remote()
    return ray.get(runner.run.remote(container))
