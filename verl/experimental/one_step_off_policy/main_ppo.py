"""``python -m verl.experimental.one_step_off_policy.main_ppo key=value ...``: the one-step-off recipe.

The config is ``config/one_step_off_ppo_trainer.yaml`` beside this file (it extends ``ppo_trainer``); the trainer is
:class:`~verl.experimental.one_step_off_policy.ray_trainer.OneStepOffRayTrainer`, built and run by
:class:`OneStepTaskRunner`. ``create_resource_pool_manager`` and ``create_role_worker_mapping`` are re-exported for
recipes that build the trainer themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.experimental.separation.entry import recipe_main
from verl.experimental.separation.task_runner import AsyncTaskRunner, refuse_restarts
from verl.experimental.separation.utils import create_resource_pool_manager, create_role_worker_mapping

__all__ = [
    "CONFIG_DIR",
    "CONFIG_NAME",
    "OneStepTaskRunner",
    "create_resource_pool_manager",
    "create_role_worker_mapping",
    "main",
]

CONFIG_DIR = Path(__file__).resolve().parent / "config"
CONFIG_NAME = "one_step_off_ppo_trainer"


class OneStepTaskRunner(AsyncTaskRunner):
    """verl's task runner of the one-step-off recipe: ``run(config)`` builds tokenizer, data, pools and the trainer
    (``trainer_cls``, default :class:`OneStepOffRayTrainer`), trains, and returns the run's summary.

    A plain class: hand it to ``run_ppo(config, task_runner_class=OneStepTaskRunner)``, which runs it as a Ray
    actor, or subclass it (verl's is already a Ray actor class, which cannot be subclassed).
    """

    def __init__(self, trainer_cls: type | None = None, **trainer_kwargs: Any) -> None:
        super().__init__("one_step_off", trainer_cls, **trainer_kwargs)

    def run(self, config: DictConfig | dict) -> dict[str, Any]:
        config = config if isinstance(config, DictConfig) else OmegaConf.create(config)
        refuse_restarts(config, self.kind)
        return super().run(config)


def main(argv: Sequence[str] | None = None) -> dict:
    return recipe_main(CONFIG_DIR, CONFIG_NAME, "one_step_off", argv)


if __name__ == "__main__":
    main()
