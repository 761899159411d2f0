"""``python -m verl.experimental.fully_async_policy.fully_async_main key=value ...``: the fully-async recipe.

The config is ``config/fully_async_ppo_trainer.yaml`` beside this file (it extends ``ppo_trainer``); the machinery
lives in this package (rollouter, message queue, trainer), and :class:`FullyAsyncTaskRunner` builds and runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf

from verl.experimental.separation.entry import recipe_main
from verl.experimental.separation.task_runner import AsyncTaskRunner

__all__ = ["CONFIG_DIR", "CONFIG_NAME", "FullyAsyncTaskRunner", "main"]

CONFIG_DIR = Path(__file__).resolve().parent / "config"
CONFIG_NAME = "fully_async_ppo_trainer"


class FullyAsyncTaskRunner(AsyncTaskRunner):
    """verl's task runner of the fully-async recipe, in verl's steps: ``run(config)`` is
    ``_initialize_components`` (``_create_trainer``, then ``_create_rollouter``) and ``_run_training_loop``, and
    returns the run's summary. ``components`` holds what the steps built, under verl's keys.

    The trainer owns its rollout here: its ``init_workers`` reserves the rollout pool and starts the replicas, the
    message queue and the rollouter beside its own workers, and its ``fit`` runs the rollouter's. A recipe's
    rollouter class therefore goes in ``FullyAsyncTrainer.rollouter_class`` (or a started one in
    ``trainer.set_rollouter``). A plain class: ``run_ppo(config, task_runner_class=FullyAsyncTaskRunner)`` runs it
    as a Ray actor.
    """

    def __init__(self, trainer_cls: type | None = None, **trainer_kwargs: Any) -> None:
        super().__init__("fully_async", trainer_cls, **trainer_kwargs)
        self.running = False
        self.components: dict[str, Any] = {}
        self.shutdown_event = threading.Event()  # set once the run has ended, however it ended
        self.restarts = 0  # attempts rebuilt so far (trainer.max_restarts)

    def run(self, config: DictConfig | dict) -> dict[str, Any]:
        """Build and train; returns the run's summary. With ``trainer.max_restarts`` a lost process (a training
        rank, a rollout server, the rollouter, the queue, a whole node) tears everything down, and the next attempt
        rebuilds trainer, replicas, queue and rollouter and resumes from the newest checkpoint this run wrote: its
        consumed prompt indices and weight version (the same :class:`RestartPolicy` as ``main_ppo``)."""
        from verl.trainer.ppo.restarts import RestartPolicy

        config = config if isinstance(config, DictConfig) else OmegaConf.create(config)
        policy = RestartPolicy(config)

        def attempt(attempt_config: DictConfig) -> dict[str, Any]:
            self.restarts = policy.restarts
            self._initialize_components(attempt_config)
            summary = self._run_training_loop()
            summary.update(restarts=policy.restarts, restart_causes=list(policy.causes))
            return summary

        try:
            return policy.run(attempt, after_failure=self._tear_down)
        finally:
            self._release_pools()
            self.shutdown_event.set()

    def _tear_down(self) -> None:
        """After a failed attempt: kill the rollouter (with the agent-loop worker in its process) and the queue, and
        free the pools (training ranks, rollout servers), so the next attempt starts on a clean cluster."""
        trainer = self.components.pop("trainer", None)
        actors = [self.components.pop(key, None) for key in ("rollouter", "message_queue")]
        actors += [getattr(trainer, "rollouter", None), getattr(trainer, "queue", None)]  # init_workers failed
        for actor in {id(a): a for a in actors if a is not None and hasattr(a, "_actor_id")}.values():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self._release_pools()

    def _release_pools(self) -> None:
        manager = self.components.pop("resource_pool_manager", None)
        if manager is not None:
            manager.release_all()

    def _initialize_components(self, config: DictConfig) -> None:
        """Worker classes and pools, then the trainer and its rollout."""
        self.components["config"] = config
        self.components["ray_worker_group_cls"] = self.add_workers(config)
        self.components["role_worker_mapping"] = dict(self.role_worker_mapping)
        self._create_trainer(config)
        self._create_rollouter(config)

    def _create_trainer(self, config: DictConfig) -> None:
        """Build the trainer (``trainer_class``) over the mapped pools and start its workers and rollout."""
        manager = self.init_resource_pool_mgr(config)
        self.components["resource_pool_manager"] = manager
        trainer = self.build_trainer(config, manager, self.components["ray_worker_group_cls"])
        trainer.restarts = self.restarts  # logged as training/restarts
        self.components.update(trainer=trainer, tokenizer=trainer.tokenizer, processor=trainer.processor)
        trainer.init_workers()

    def _create_rollouter(self, config: DictConfig) -> None:
        """The rollouter, the message queue and its client the trainer started on the rollout pool, and the
        number of updates the rollouter's prompts make (``total_train_steps``)."""
        trainer = self.components["trainer"]
        self.components.update(
            rollouter=trainer.rollouter,
            message_queue=trainer.queue,
            message_queue_client=trainer.message_queue_client,
            total_train_steps=trainer.total_train_steps,
        )

    def _run_training_loop(self) -> dict[str, Any]:
        """Train until the rollouter's stream or the step budget ends (a failure on either side stops both, with
        its cause); returns the run's summary."""
        from verl.utils.ray_utils import settle_task_events

        config, trainer = self.components["config"], self.components["trainer"]
        self.running = True
        try:
            trainer.fit()
            summary = self.result(config, trainer)
        finally:
            self.running = False
        settle_task_events(config)
        return summary


def main(argv: Sequence[str] | None = None) -> dict:
    return recipe_main(CONFIG_DIR, CONFIG_NAME, "fully_async", argv)


if __name__ == "__main__":
    main()
