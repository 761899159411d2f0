"""Command-line entry of the PPO trainer: ``python -m verl.trainer.main_ppo [hydra flags] key=value ...``.

Before Hydra parses the command line, verl's spellings (``actor_rollout_ref.rollout.n=8``) are rewritten to the
flattened groups (``rollout.n=8``; see ``verl.trainer.config.legacy``), so ``--cfg job`` prints flattened groups only
and Hydra's strict mode rejects a truly unknown key by name. After composition, verl-spelled blocks of a user YAML are
translated as well, every group is validated into its typed dataclass, keys without effect are named once, the batch
plan is printed, and :func:`run_ppo` starts training.

Hydra's flags behave as in verl: a relative ``--config-path`` is relative to this file's folder (``config`` is the
packaged one), ``--config-dir`` adds a search folder, and a user's config can build on the packaged ``ppo_trainer``
(its folder is always searched). ``--config-name demo`` is the built-in demo, which takes overrides; with no
arguments at all the demo runs as it is. verl's Megatron/TorchTitan/VeOmni configs are refused naming the backend.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig, OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config.batch_plan import compute_batch_plan, format_batch_plan
from verl.trainer.config.inert_keys import InertConfigWarning, check_inert_keys
from verl.trainer.config.legacy import LegacyConfigWarning, override_key, translate_legacy_overrides
from verl.trainer.config.ppo_config import PPOConfig, build_ppo_config
from verl.trainer.config.recipe_keys import RecipeKeyWarning, warn_recipe_keys
from verl.trainer.config.resolve import attach_ppo_config, resolve_composed
from verl.trainer.demo import DEMO_CONFIG_NAME
from verl.utils.import_utils import lazy_exports

if TYPE_CHECKING:
    from verl.experimental.reward_loop.migrate import migrate_legacy_reward_impl
    from verl.trainer.ppo.task_runner import TaskRunner
    from verl.utils.dataset.factory import create_rl_dataset
    from verl.utils.dataset.sampler import create_rl_sampler
    from verl.utils.device import auto_set_device

__all__ = [
    "TaskRunner",
    "auto_set_device",
    "create_rl_dataset",
    "create_rl_sampler",
    "main",
    "migrate_legacy_reward_impl",
    "resolve_config",
    "run_ppo",
]

# What verl's recipes import from this module, loaded on first use (they pull in Ray and torch, which `--cfg job`
# does not need): name -> defining module.
_LAZY_EXPORTS = {
    "TaskRunner": "verl.trainer.ppo.task_runner",
    "auto_set_device": "verl.utils.device",
    "create_rl_dataset": "verl.utils.dataset.factory",
    "create_rl_sampler": "verl.utils.dataset.sampler",
    "migrate_legacy_reward_impl": "verl.experimental.reward_loop.migrate",
}

__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS)


# Hydra flags that take a value (the next token unless given as --flag=value).
_VALUE_FLAGS = {
    "-cp",
    "--config-path",
    "-cn",
    "--config-name",
    "-cd",
    "--config-dir",
    "-c",
    "--cfg",
    "-p",
    "--package",
    "--experimental-rerun",
    "-i",
    "--info",
}
_INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
# verl's trainer configs for engines this build does not include.
_OTHER_ENGINE_CONFIGS = {
    "ppo_megatron_trainer": "verl's Megatron-LM engine",
    "ppo_torchtitan_trainer": "verl's TorchTitan engine",
    "ppo_veomni_trainer": "verl's VeOmni engine",
}
_HERE = Path(__file__).resolve().parent

# Flattened keys the user set on the command line (they win over legacy blocks in YAML files).
_EXPLICIT_KEYS: set[str] = set()
# True when the run is the built-in demo (verl.trainer.demo): its reward curve is printed at the end.
_DEMO_MODE = False
# What trains the resolved config (None: run_ppo) and what it returned; the async recipes pass their own (main).
_TRAIN: Callable[[DictConfig], Any] | None = None
_RESULT: Any = None


def run_ppo(config: DictConfig, task_runner_class: Any = None) -> str | None:
    """Start or join Ray and train with ``config`` (a resolved DictConfig); returns the run folder.

    ``task_runner_class`` (verl's recipe hook): a :class:`TaskRunner` subclass, plain or wrapped by ``ray.remote``,
    that replaces the built-in one (see ``verl.trainer.ppo.task_runner``).
    """
    from verl.trainer.ppo import task_runner

    return task_runner.run_ppo(config, task_runner_class=task_runner_class)


def resolve_config(
    config: DictConfig, explicit_keys: Sequence[str] = (), derived: set[str] | None = None
) -> tuple[DictConfig, PPOConfig]:
    """Translate legacy blocks, resolve interpolations and build the typed config, once; returns the DictConfig
    (carrying its typed twin, which the task runner, the trainer and the workers reuse) and the twin.

    ``derived``: when given, filled with the keys whose values were interpolations (for :func:`check_inert_keys`).
    """
    config = resolve_composed(config, explicit_keys=explicit_keys, derived=derived)
    typed = build_ppo_config(config)
    return attach_ppo_config(config, typed), typed


def check_data_files(config: Any) -> None:
    """Refuse, naming the key and the file, data files that do not exist on this machine. Not checked: remote URLs,
    runs joining an existing Ray cluster (its nodes may hold the files) and a user data set class
    (``data.custom_cls``), which may read other kinds of paths."""
    if os.environ.get("RAY_ADDRESS") or OmegaConf.select(config, "data.custom_cls.path", default=None):
        return
    for key in ("train_files", "val_files"):
        files = config.data.get(key)
        if files is None:
            continue
        for path in [files] if isinstance(files, str) else list(files):
            path = str(path)
            if "://" in path or os.path.exists(os.path.expanduser(path)):
                continue
            raise ConfigError(
                f"file not found: {path}. Point data.train_files / data.val_files at your parquet files (see "
                f"examples/data_preprocess/), or run the built-in demo: python -m verl.trainer.main_ppo "
                f"--config-name {DEMO_CONFIG_NAME} [key=value ...]",
                key=f"data.{key}",
            )


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def _hydra_main(config: DictConfig) -> None:
    derived: set[str] = set()
    try:
        config, typed = resolve_config(config, sorted(_EXPLICIT_KEYS), derived=derived)
        check_data_files(config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    check_inert_keys(typed, skip=derived - _EXPLICIT_KEYS)
    warn_recipe_keys(typed)
    print(format_batch_plan(compute_batch_plan(typed)), flush=True)
    global _RESULT
    if _TRAIN is not None:
        _RESULT = _TRAIN(config)
        return
    run_dir = _RESULT = run_ppo(config)
    if _DEMO_MODE and run_dir:
        from verl.trainer.demo import format_reward_curve

        try:
            print(format_reward_curve(run_dir), flush=True)
        except (OSError, ValueError) as exc:  # e.g. the `file` logger was switched off
            print(f"(no reward curve: {exc})", flush=True)


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """Split command-line tokens into Hydra flags and overrides; also return the flags' values."""
    flags: list[str] = []
    overrides: list[str] = []
    values: dict[str, str] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-"):
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


def _flag(values: dict[str, str], long: str, short: str) -> str | None:
    return values.get(long, values.get(short))


def _config_dir(values: dict[str, str]) -> Path | None:
    """``--config-path`` as Hydra reads it: absolute, or relative to the folder of this file."""
    path = _flag(values, "--config-path", "-cp")
    if path is None:
        return None
    return Path(os.path.expanduser(path)) if os.path.isabs(os.path.expanduser(path)) else (_HERE / path).resolve()


def _check_config_name(config_name: str) -> None:
    engine = _OTHER_ENGINE_CONFIGS.get(config_name)
    if engine is not None:
        raise ConfigError(
            f"{config_name} is the trainer config of {engine}, which this build does not include; use "
            "ppo_trainer (the default; FSDP/FSDP2 training, actor.strategy=fsdp|fsdp2)",
            key="--config-name",
        )


def _print_job_config(values: dict[str, str], overrides: list[str]) -> int:
    """``--cfg job``: print the effective config after legacy translation (Hydra alone would print the raw one)."""
    from hydra.errors import HydraException

    from verl.trainer.config.compose import compose_ppo_config

    config_name = (_flag(values, "--config-name", "-cn") or "ppo_trainer").removesuffix(".yaml")
    extra = [values["--config-dir"]] if "--config-dir" in values else ([values["-cd"]] if "-cd" in values else [])
    try:
        config = compose_ppo_config(
            overrides, config_name=config_name, config_dir=_config_dir(values), extra_search_dirs=extra
        )
        build_ppo_config(config)  # fail on wrong types and inconsistent sizes here too
    except (HydraException, ConfigError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    if "--resolve" in values:
        OmegaConf.resolve(config)
    print(OmegaConf.to_yaml(config), end="")
    return 0


def _one_line_config_warnings() -> None:
    """Print config warnings as ``Category: message`` (one line each), without the source line Python adds."""
    if getattr(warnings.formatwarning, "_verl_config", False):
        return
    original = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):  # noqa: ANN001 - warnings' signature
        if issubclass(category, LegacyConfigWarning | InertConfigWarning | RecipeKeyWarning):
            return f"{category.__name__}: {message}\n"
        return original(message, category, filename, lineno, line)

    setattr(formatwarning, "_verl_config", True)  # noqa: B010 - marks ours (function attribute)
    warnings.formatwarning = formatwarning


def main(argv: Sequence[str] | None = None, train: Callable[[DictConfig], Any] | None = None) -> Any:
    """Translate verl spellings in ``argv`` (default ``sys.argv[1:]``), then run Hydra; returns what training
    returned (the run folder for ``run_ppo``).

    ``train`` replaces :func:`run_ppo` as what trains the resolved, validated config: the async recipes' entry
    points pass theirs, so every entry point shares this command line (flags, legacy spellings, ``--cfg job``,
    data-file and inert-key checks, the batch plan)."""
    global _DEMO_MODE, _TRAIN, _RESULT
    _one_line_config_warnings()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["--config-name", DEMO_CONFIG_NAME]
        print(
            "no arguments: running the built-in demo (GRPO on the target-digit task, tiny model, CPU); "
            f"add overrides with --config-name {DEMO_CONFIG_NAME} key=value ...",
            flush=True,
        )
    flags, overrides, values = _split_argv(argv)
    config_name = (_flag(values, "--config-name", "-cn") or "ppo_trainer").removesuffix(".yaml")
    try:
        _check_config_name(config_name)
        overrides, _ = translate_legacy_overrides(overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    _DEMO_MODE = config_name == DEMO_CONFIG_NAME and _config_dir(values) in (None, _HERE / "config")
    if _DEMO_MODE:
        from verl.trainer.demo import prepare_demo_data

        prepare_demo_data()
    if _flag(values, "--cfg", "-c") == "job" and "--multirun" not in values and "-m" not in values:
        sys.exit(_print_job_config(values, overrides))
    from verl.trainer.config.compose import search_path_override

    overrides = [*search_path_override(_config_dir(values), config_name), *overrides]
    _EXPLICIT_KEYS.clear()
    _EXPLICIT_KEYS.update(override_key(o) for o in overrides)
    sys.argv = [sys.argv[0], *flags, *overrides]
    _TRAIN, _RESULT = train, None
    try:
        _hydra_main()
    finally:
        _TRAIN = None
    return _RESULT


if __name__ == "__main__":
    main()
