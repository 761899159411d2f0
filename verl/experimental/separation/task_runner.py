"""Run an async recipe: build both resource pools and the trainer inside a Ray task-runner actor, then train.

``run_async_training(config, "fully_async")`` or ``"one_step_off"``; the recipe entry points under ``recipe/`` only
compose the config and call this.
"""

from __future__ import annotations

import importlib
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf

from verl.trainer.ppo.roles import Role

__all__ = ["TRAINERS", "AsyncTaskRunner", "build_async_role_worker_mapping", "run_async_training"]

TRAINERS = {
    "fully_async": "verl.experimental.fully_async_policy.fully_async_trainer:FullyAsyncTrainer",
    "one_step_off": "verl.experimental.one_step_off_policy.ray_trainer:OneStepOffRayTrainer",
}
TRAINER_POOL = "global_pool"


def _load(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build_async_role_worker_mapping(config: DictConfig) -> tuple[dict[Role, type], dict[Role, str], dict[str, list]]:
    """Trainer pool (``trainer.nnodes x n_gpus_per_node``: actor, critic, ref) and rollout pool
    (``rollout.nnodes x rollout.n_gpus_per_node``: the standalone servers)."""
    from verl.experimental.separation.engine_workers import DetachActorWorker
    from verl.experimental.separation.rollout_pool import ROLLOUT_POOL, rollout_pool_spec
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    strategy = str(config.actor.strategy)
    if strategy not in ("fsdp", "fsdp2"):
        raise ValueError(f"actor.strategy={strategy!r} is not available; supported: fsdp, fsdp2")
    trainer = config.trainer
    spec = {
        TRAINER_POOL: [int(trainer.n_gpus_per_node)] * int(trainer.nnodes),
        ROLLOUT_POOL: rollout_pool_spec(config.rollout),
    }
    mapping: dict[Role, type] = {Role.Actor: DetachActorWorker}
    pools: dict[Role, str] = {Role.Actor: TRAINER_POOL, Role.Rollout: ROLLOUT_POOL}
    if need_critic(config):
        mapping[Role.Critic] = CriticWorker
        pools[Role.Critic] = TRAINER_POOL
    if need_reference_policy(config):
        mapping[Role.RefPolicy] = ActorRolloutRefWorker
        pools[Role.RefPolicy] = TRAINER_POOL
    return mapping, pools, spec


def build_trainer(config: DictConfig, kind: str, trainer_cls: type | None = None, **trainer_kwargs: Any) -> Any:
    """Tokenizer, reward functions, pools and the recipe's trainer (workers not yet started); ``trainer_cls``
    replaces the recipe's class (a subclass of it, for recipes built on this one)."""
    from verl.single_controller.ray import ResourcePoolManager
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

    if kind not in TRAINERS:
        raise ValueError(f"unknown async recipe {kind!r}; known: {sorted(TRAINERS)}")
    tokenizer = load_tokenizer(config.model, resolve_model_path(config.model))
    mapping, pools, spec = build_async_role_worker_mapping(config)
    manager = ResourcePoolManager(resource_pool_spec=spec, mapping=pools, device=str(config.trainer.device))
    return (trainer_cls or _load(TRAINERS[kind]))(
        config=config,
        tokenizer=tokenizer,
        role_worker_mapping=mapping,
        resource_pool_manager=manager,
        reward_fn=load_reward_manager(config, tokenizer, num_examine=0),
        val_reward_fn=load_reward_manager(config, tokenizer, num_examine=1),
        **trainer_kwargs,
    )


@ray.remote(num_cpus=0.1)
class AsyncTaskRunner:
    """Hosts the trainer; the rollouter and queue actors it creates die with it (Ray fate sharing)."""

    def run(self, config_container: dict, kind: str, trainer_cls: type | None = None) -> dict[str, Any]:
        config = OmegaConf.create(config_container)
        trainer = build_trainer(config, kind, trainer_cls)
        try:
            trainer.init_workers()
            trainer.fit()
            return self._summary(config, trainer)
        finally:
            trainer.resource_pool_manager.release_all()

    @staticmethod
    def _summary(config: DictConfig, trainer: Any) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "run_dir": str(config.trainer.default_local_dir),
            "global_steps": trainer.global_steps,
            "weight_version": trainer.weight_version,
            "weight_checksums": dict(trainer.weight_checksums),
        }
        actors = [getattr(r, "actor", r) for r in getattr(trainer, "replicas", [])]
        summary["replica_versions"] = ray.get([a.get_version.remote() for a in actors], timeout=60)
        if hasattr(trainer, "rollout_statistics"):
            summary["rollout"] = trainer.rollout_statistics()
            summary["consumed_indices"] = list(trainer.consumed_indices)
            summary["stale_groups_per_sync"] = list(trainer.stale_groups_per_sync)
            summary["leftover_groups"] = trainer.leftover_groups
        if hasattr(trainer, "generation_versions"):
            summary["generation_versions"] = dict(trainer.generation_versions)
        return summary


def run_async_training(config: DictConfig, kind: str) -> dict[str, Any]:
    """Start or join Ray and train with the ``kind`` recipe; returns a summary (run folder, counters)."""
    from verl.single_controller.ray.node_placement import on_this_node
    from verl.trainer.ppo.task_runner import _ray_init_kwargs

    max_restarts = int(config.trainer.max_restarts)
    if max_restarts:
        raise ValueError(
            f"trainer.max_restarts={max_restarts}: the {kind} recipe does not restart itself (main_ppo's task runner "
            "does); set trainer.max_restarts=0 and rerun with trainer.resume_mode=auto to continue from the last "
            "checkpoint after a lost worker"
        )
    if not ray.is_initialized():
        ray.init(**_ray_init_kwargs(config))
    from verl.utils.ray_utils import dump_ray_timeline

    runner = AsyncTaskRunner.options(**on_this_node(0.1)).remote()
    try:
        return ray.get(runner.run.remote(OmegaConf.to_container(config, resolve=True), kind))
    finally:  # a failed run's timeline shows where it stopped
        dump_ray_timeline(config)
