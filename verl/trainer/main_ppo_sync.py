"""verl 0.8's ``main_ppo_sync``: the synchronous PPO trainer built from the config alone.

verl 0.8's ``PPOTrainer(config, role_worker_mapping, resource_pool_manager)`` loads the tokenizer, the data sets and
the reward functions itself instead of taking them as arguments. Here it is :class:`RayPPOTrainer` (colocated
rollout and training, weights synced after every step) with that constructor; verl moved its batches through
TransferQueue, this trainer moves them as Ray object refs, with the same steps and metrics.

``TaskRunner`` builds the trainer that way inside the Ray task runner (``run_ppo(config, task_runner_class=
TaskRunner)``). ``python -m verl.trainer.main_ppo_sync`` is ``python -m verl.trainer.main_ppo``: the same flags,
overrides, config checks and trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.legacy import LEGACY_ROOTS
from verl.trainer.config.legacy_view import LEGACY_VIEW_KEY
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.task_runner import TaskRunner as _BaseTaskRunner
from verl.trainer.ppo.utils import Role, WorkerType

__all__ = ["PPOTrainer", "TaskRunner", "main"]


def _is_legacy_view(config: DictConfig) -> bool:
    """Whether ``config.actor_rollout_ref`` is the read-only alias node of the flattened groups (``add_legacy_view``)
    rather than settings of its own."""
    node = config.get(LEGACY_VIEW_KEY)
    return isinstance(node, DictConfig) and all(
        OmegaConf.is_interpolation(node, cast(str, key)) for key in node if key != "hybrid_engine"
    )


def _flattened(config: Any) -> DictConfig:
    """``config`` in this package's flattened groups: verl-spelled blocks (``actor_rollout_ref.*``,
    ``reward_model.*``, ...) are translated and the result validated, as ``main_ppo`` does; a flattened config
    (possibly carrying the alias node) is returned as it is."""
    if not isinstance(config, DictConfig):
        config = OmegaConf.create(config)
    roots = [root for root in LEGACY_ROOTS if root in config]
    if not roots or (roots == [LEGACY_VIEW_KEY] and _is_legacy_view(config)):
        return config
    from verl.trainer.main_ppo import resolve_config

    config, _ = resolve_config(config)
    return config


class PPOTrainer(RayPPOTrainer):
    """:class:`RayPPOTrainer` built from ``config`` (see the module docstring).

    Args:
        config: the trainer config, flattened or in verl's spelling.
        role_worker_mapping: worker class per :class:`Role` (an actor role is required).
        resource_pool_manager: where each role's workers run.
        tokenizer / processor: taken as given; by default loaded from ``model.path``.
        **kwargs: any other :class:`RayPPOTrainer` argument (data sets, sampler, reward functions, worker-group
            class); reward functions default to the configured ones, data sets to ``data.train_files`` /
            ``data.val_files``.
    """

    def __init__(
        self,
        config: Any,
        role_worker_mapping: dict[Role, WorkerType],
        resource_pool_manager: Any,
        tokenizer: Any = None,
        processor: Any = None,
        **kwargs: Any,
    ) -> None:
        config = _flattened(config)
        if tokenizer is None:
            from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

            tokenizer = load_tokenizer(config.model, resolve_model_path(config.model))
        super().__init__(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            processor=processor,
            **kwargs,
        )


class TaskRunner(_BaseTaskRunner):
    """The task runner of ``main_ppo`` building :class:`PPOTrainer` from the config, as verl 0.8's did."""

    trainer_class = PPOTrainer

    def run(self, config: DictConfig | dict) -> str:
        """``main_ppo``'s run on the flattened config; returns the run folder (``trainer.default_local_dir``)."""
        return super().run(_flattened(config))

    def build_trainer(self, config: DictConfig, resource_pool_manager: Any, worker_group_cls: type) -> PPOTrainer:
        """``PPOTrainer(config, role_worker_mapping, resource_pool_manager)``: it loads tokenizer, data and rewards."""
        return self.trainer_class(
            config=config,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            ray_worker_group_cls=worker_group_cls,
        )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m verl.trainer.main_ppo_sync [hydra flags] key=value ...``: ``main_ppo``'s command line."""
    from verl.trainer import main_ppo

    main_ppo.main(argv)


if __name__ == "__main__":
    main()
