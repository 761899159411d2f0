"""Run an async recipe: build both resource pools and the trainer inside a Ray task-runner actor, then train.

``run_async_training(config, "fully_async")`` or ``"one_step_off"``. :class:`AsyncTaskRunner` is ``main_ppo``'s
:class:`~verl.trainer.ppo.task_runner.TaskRunner` with the recipe's trainer class: the same pools, worker classes and
start-up, and a summary of the run as its result.
"""

from __future__ import annotations

import importlib
from typing import Any

import ray
from omegaconf import DictConfig

from verl.trainer.ppo.roles import Role
from verl.trainer.ppo.task_runner import GLOBAL_POOL, TaskRunner

__all__ = ["TASK_RUNNERS", "TRAINERS", "AsyncTaskRunner", "build_async_role_worker_mapping", "run_async_training"]

TRAINERS = {
    "fully_async": "verl.experimental.fully_async_policy.fully_async_trainer:FullyAsyncTrainer",
    "one_step_off": "verl.experimental.one_step_off_policy.ray_trainer:OneStepOffRayTrainer",
}
# each recipe's task runner, at verl's module path
TASK_RUNNERS = {
    "fully_async": "verl.experimental.fully_async_policy.fully_async_main:FullyAsyncTaskRunner",
    "one_step_off": "verl.experimental.one_step_off_policy.main_ppo:OneStepTaskRunner",
}
# the recipes whose task runner restarts after a lost process (trainer.max_restarts)
SELF_HEALING = frozenset({"fully_async"})
TRAINER_POOL = GLOBAL_POOL  # the trainer side's pool: main_ppo's global pool


def _load(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build_async_role_worker_mapping(config: DictConfig) -> tuple[dict[Role, type], dict[Role, str], dict[str, list]]:
    """Trainer pool (``trainer.nnodes x n_gpus_per_node``: actor, critic, ref) and rollout pool
    (``rollout.nnodes x rollout.n_gpus_per_node``: the standalone servers), as :class:`AsyncTaskRunner` builds them."""
    from verl.trainer.ppo.task_runner import pool_spec

    runner = AsyncTaskRunner()
    runner.add_workers(config)
    return runner.role_worker_mapping, runner.mapping, pool_spec(config)


class AsyncTaskRunner(TaskRunner):
    """``main_ppo``'s task runner with an async recipe's trainer: ``TRAINERS[kind]``, or ``trainer_cls`` (a subclass
    of it, for recipes built on this one) with ``trainer_kwargs``. The rollout always has a pool of its own, and
    ``run`` returns the run's summary (run folder, counters, versions). The rollouter and queue actors the trainer
    creates die with this actor (Ray fate sharing)."""

    def __init__(self, kind: str = "fully_async", trainer_cls: type | None = None, **trainer_kwargs: Any) -> None:
        super().__init__()
        if kind not in TRAINERS:
            raise ValueError(f"unknown async recipe {kind!r}; known: {sorted(TRAINERS)}")
        self.kind = kind
        self.trainer_class = trainer_cls or _load(TRAINERS[kind])
        self.trainer_kwargs = dict(trainer_kwargs)

    def add_actor_rollout_worker(self, config: DictConfig) -> tuple[type, type]:
        from verl.experimental.separation.rollout_pool import rollout_pool_spec

        rollout_pool_spec(config.rollout)  # an async recipe without a rollout pool is refused naming the keys
        return super().add_actor_rollout_worker(config)

    def result(self, config: DictConfig, trainer: Any) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "run_dir": str(config.trainer.default_local_dir),
            "global_steps": trainer.global_steps,
            "weight_version": trainer.weight_version,
            "weight_checksums": dict(trainer.weight_checksums),
            "replica_checksums": dict(getattr(trainer, "replica_checksums", {})),  # of the last publish
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


def build_trainer(config: DictConfig, kind: str, trainer_cls: type | None = None, **trainer_kwargs: Any) -> Any:
    """Tokenizer, reward functions, pools and the recipe's trainer (workers not yet started), as
    :class:`AsyncTaskRunner` builds them; ``trainer_cls`` replaces the recipe's class."""
    runner = AsyncTaskRunner(kind, trainer_cls, **trainer_kwargs)
    worker_group_cls = runner.add_workers(config)
    return runner.build_trainer(config, runner.init_resource_pool_mgr(config), worker_group_cls)


def refuse_restarts(config: DictConfig, kind: str) -> None:
    """A recipe that does not rebuild its workers after a loss (one-step-off): ``trainer.max_restarts`` must be 0.
    The fully-async recipe restarts itself (``FullyAsyncTaskRunner.run``)."""
    max_restarts = int(config.trainer.max_restarts)
    if max_restarts:
        raise ValueError(
            f"trainer.max_restarts={max_restarts}: the {kind} recipe does not restart itself (main_ppo's task runner "
            "and the fully_async recipe do); set trainer.max_restarts=0 and rerun with trainer.resume_mode=auto to "
            "continue from the last checkpoint after a lost worker"
        )


def run_async_training(config: DictConfig, kind: str, trainer_cls: type | None = None) -> dict[str, Any]:
    """Start or join Ray and train with the ``kind`` recipe in an actor of its task runner (``TASK_RUNNERS``, both
    :class:`AsyncTaskRunner` subclasses); returns the run's summary.

    A run that ended because a worker or a controller-side actor died raises that :class:`WorkerError` itself
    (not Ray's wrapper of the task runner's call), so its first line names the dead process."""
    from verl.experimental.separation.deaths import worker_error_in
    from verl.trainer.ppo.task_runner import run_task_runner

    if kind not in TASK_RUNNERS:
        raise ValueError(f"unknown async recipe {kind!r}; known: {sorted(TASK_RUNNERS)}")
    if kind not in SELF_HEALING:
        refuse_restarts(config, kind)  # here, before Ray starts
    try:
        return run_task_runner(config, _load(TASK_RUNNERS[kind]), trainer_cls=trainer_cls)
    except ray.exceptions.RayTaskError as err:
        named = worker_error_in(err)
        if named is None:
            raise
        raise named from None
