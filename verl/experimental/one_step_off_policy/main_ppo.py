"""``python -m verl.experimental.one_step_off_policy.main_ppo key=value ...``: the one-step-off recipe.

The config is ``config/one_step_off_ppo_trainer.yaml`` beside this file (it extends ``ppo_trainer``); the trainer is
:class:`~verl.experimental.one_step_off_policy.ray_trainer.OneStepOffRayTrainer`. ``create_resource_pool_manager``
and ``create_role_worker_mapping`` are re-exported for recipes that build the trainer themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from verl.experimental.separation.entry import recipe_main
from verl.experimental.separation.utils import create_resource_pool_manager, create_role_worker_mapping

__all__ = ["CONFIG_DIR", "CONFIG_NAME", "create_resource_pool_manager", "create_role_worker_mapping", "main"]

CONFIG_DIR = Path(__file__).resolve().parent / "config"
CONFIG_NAME = "one_step_off_ppo_trainer"


def main(argv: Sequence[str] | None = None) -> dict:
    return recipe_main(CONFIG_DIR, CONFIG_NAME, "one_step_off", argv)


if __name__ == "__main__":
    main()
