"""Entry of the async recipes: ``main_ppo``'s command line over the recipe's YAML, training with the recipe.

``python -m verl.experimental.fully_async_policy.fully_async_main`` and ``python -m verl.experimental.
one_step_off_policy.main_ppo`` (verl's entry points; ``recipe.*`` keeps the older paths) both run :func:`recipe_main`,
which hands :func:`verl.trainer.main_ppo.main` the recipe's config folder and name and its own training function: the
flags, verl's spellings, ``--cfg job``, the checks and the batch plan are main_ppo's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

__all__ = ["compose_recipe_config", "recipe_main"]


def compose_recipe_config(config_dir: Path, config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``config_dir/config_name.yaml`` (which extends ``ppo_trainer``), translate legacy keys, resolve and
    validate every group; a bad key or value raises ``ConfigError`` naming it."""
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.config.legacy import override_key
    from verl.trainer.main_ppo import resolve_config

    config = compose_ppo_config(list(overrides), config_name=config_name, config_dir=str(config_dir))
    config, _ = resolve_config(config, sorted(override_key(o) for o in overrides))
    return config


def recipe_main(config_dir: Path, config_name: str, kind: str, argv: Sequence[str] | None = None) -> dict:
    """``main_ppo``'s command line over ``config_dir/config_name.yaml``, training with the ``kind`` recipe; returns
    the run's summary (``{}`` when nothing trained)."""
    from verl.experimental.separation.task_runner import run_async_training
    from verl.trainer.main_ppo import main

    def train(config: DictConfig) -> dict:
        summary = run_async_training(config, kind)
        print(
            f"{kind} finished: {summary.get('global_steps')} steps, weight version {summary.get('weight_version')}",
            flush=True,
        )
        return summary

    argv = list(sys.argv[1:] if argv is None else argv)
    return main(["--config-path", str(config_dir), "--config-name", config_name, *argv], train=train) or {}
