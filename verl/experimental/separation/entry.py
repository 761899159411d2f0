"""Shared command line of the async recipes: Hydra-style ``key=value`` overrides on the recipe's YAML.

``python -m verl.experimental.fully_async_policy.fully_async_main`` and ``python -m verl.experimental.
one_step_off_policy.main_ppo`` (verl's entry points; ``recipe.*`` keeps the older paths) both run :func:`recipe_main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

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
    """Parse ``argv`` overrides (``--cfg job`` prints the config), print the batch plan and train."""
    from verl.base_config import ConfigError
    from verl.experimental.separation.task_runner import run_async_training
    from verl.trainer.config.batch_plan import compute_batch_plan, format_batch_plan
    from verl.trainer.config.inert_keys import check_inert_keys
    from verl.trainer.config.ppo_config import build_ppo_config

    argv = list(sys.argv[1:] if argv is None else argv)
    print_only = "--cfg" in argv
    overrides = [a for a in argv if not a.startswith("-") and a != "job"]
    try:
        config = compose_recipe_config(config_dir, config_name, overrides)
        typed = build_ppo_config(config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    if print_only:
        print(OmegaConf.to_yaml(config), end="")
        return {}
    check_inert_keys(typed)
    print(format_batch_plan(compute_batch_plan(typed)), flush=True)
    summary = run_async_training(config, kind)
    print(
        f"{kind} finished: {summary.get('global_steps')} steps, weight version {summary.get('weight_version')}",
        flush=True,
    )
    return summary
