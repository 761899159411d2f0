"""Command-line entry of the PPO trainer: ``python -m verl.trainer.main_ppo [hydra flags] key=value ...``.

Before Hydra parses the command line, legacy overrides (``actor_rollout_ref.rollout.n=8``) are rewritten to the
flattened groups (``rollout.n=8``) with one deprecation warning each, so ``--cfg job`` prints flattened groups only
and Hydra's strict mode rejects a truly unknown key by name. After composition, legacy blocks of a user YAML are
translated as well, every group is validated into its typed dataclass, the batch plan is printed, and
:func:`run_ppo` starts training.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import hydra
from omegaconf import DictConfig, OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config.batch_plan import compute_batch_plan, format_batch_plan
from verl.trainer.config.inert_keys import check_inert_keys
from verl.trainer.config.legacy import override_key, translate_legacy_config, translate_legacy_overrides
from verl.trainer.config.ppo_config import PPOConfig, build_ppo_config

__all__ = ["main", "resolve_config", "run_ppo"]

# Hydra flags that take a value (the next token unless given as --flag=value).
_VALUE_FLAGS = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg",
                "-p", "--package", "--experimental-rerun", "-i", "--info"}
_INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}

# Flattened keys the user set on the command line (they win over legacy blocks in YAML files).
_EXPLICIT_KEYS: set[str] = set()
# True when started with no arguments at all: the built-in demo (verl.trainer.demo).
_DEMO_MODE = False


def run_ppo(config: DictConfig) -> str:
    """Start or join Ray, build the resource pools and workers, and train; returns the run folder."""
    from verl.trainer.ppo.task_runner import run_ppo as _run_ppo

    return _run_ppo(config)


def resolve_config(config: DictConfig, explicit_keys: Sequence[str] = ()) -> tuple[DictConfig, PPOConfig]:
    """Translate legacy blocks, resolve interpolations and validate; returns the DictConfig and its typed twin."""
    from verl.trainer.config.compose import default_ppo_config

    try:
        defaults = default_ppo_config()
    except Exception:  # a user config tree without the packaged defaults on its search path
        defaults = None
    config, _ = translate_legacy_config(config, explicit_keys=explicit_keys, defaults=defaults)
    OmegaConf.resolve(config)
    return config, build_ppo_config(config)


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def _hydra_main(config: DictConfig) -> None:
    try:
        config, typed = resolve_config(config, sorted(_EXPLICIT_KEYS))
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    check_inert_keys(typed)
    print(format_batch_plan(compute_batch_plan(typed)), flush=True)
    run_dir = run_ppo(config)
    if _DEMO_MODE:
        from verl.trainer.demo import format_reward_curve

        print(format_reward_curve(run_dir), flush=True)


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """Split command-line tokens into Hydra flags and overrides; also return the flags' values."""
    flags: list[str] = []
    overrides: list[str] = []
    values: dict[str, str] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and not token.startswith("--") or token.startswith("--"):
            name, eq, value = token.partition("=")
            flags.append(token)
            if name in _VALUE_FLAGS and not eq:
                takes = i + 1 < len(argv) and (name not in ("-i", "--info") or argv[i + 1] in _INFO_TOPICS)
                if takes:
                    value = argv[i + 1]
                    flags.append(value)
                    i += 1
            values[name] = value
        else:
            overrides.append(token)
        i += 1
    return flags, overrides, values


def _print_job_config(values: dict[str, str], overrides: list[str]) -> int:
    """``--cfg job``: print the effective config after legacy translation (Hydra alone would print the raw one)."""
    from hydra.errors import HydraException

    from verl.trainer.config.compose import compose_ppo_config

    config_dir = values.get("--config-path", values.get("-cp"))
    if config_dir is not None:
        config_dir = os.path.abspath(config_dir)
    config_name = values.get("--config-name", values.get("-cn", "ppo_trainer"))
    try:
        config = compose_ppo_config(overrides, config_name=config_name, config_dir=config_dir)
        build_ppo_config(config)  # fail on wrong types and inconsistent sizes here too
    except (HydraException, ConfigError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    if "--resolve" in values:
        OmegaConf.resolve(config)
    print(OmegaConf.to_yaml(config), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Translate legacy overrides in ``argv`` (default ``sys.argv[1:]``), then run Hydra."""
    global _DEMO_MODE
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        from verl.trainer.demo import demo_overrides

        _DEMO_MODE = True
        argv = demo_overrides()
        print("no arguments: running the built-in demo (GRPO on the target-digit task, tiny model, CPU)", flush=True)
    flags, overrides, values = _split_argv(argv)
    try:
        overrides, _ = translate_legacy_overrides(overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    if values.get("--cfg", values.get("-c")) == "job" and "--multirun" not in values and "-m" not in values:
        sys.exit(_print_job_config(values, overrides))
    _EXPLICIT_KEYS.clear()
    _EXPLICIT_KEYS.update(override_key(o) for o in overrides)
    sys.argv = [sys.argv[0], *flags, *overrides]
    _hydra_main()


if __name__ == "__main__":
    main()
