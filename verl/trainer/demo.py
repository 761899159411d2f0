"""The built-in demo: `python -m verl.trainer.main_ppo` with no arguments, or `--config-name demo` with overrides.

It trains GRPO on the synthetic target-digit task (prompt `d=`, reward = fraction of 8 response tokens equal
to `d`) from the randomly initialised tiny model, on CPU with 2 worker processes, and prints the reward curve.
Its settings are the packaged config `verl/trainer/config/demo.yaml` (ordinary, documented keys on top of
`ppo_trainer`). Model and data are built once under the cache folder (`$VERL_CACHE_DIR`, default `~/.cache/verl`)
with the same code paths as real checkpoints and parquet files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from verl.utils.tiny_model import default_cache_dir

DEMO_CONFIG_NAME = "demo"
DEMO_TASK = "target_digit"
CURVE_WINDOW = 10
BAR_WIDTH = 40
_DATA_KEYS = {"data.train_files": "train", "data.val_files": "test"}


def demo_cache_dir() -> Path:
    """`$VERL_CACHE_DIR` or `~/.cache/verl`: the parent of the tiny model cache."""
    return Path(os.environ.get("VERL_CACHE_DIR") or default_cache_dir().parent)


def demo_config_path() -> Path:
    """The packaged demo config (`--config-name demo`)."""
    return Path(__file__).parent / "config" / f"{DEMO_CONFIG_NAME}.yaml"


def prepare_task_data(task: str, cache_dir: Path | None = None) -> dict[str, Path]:
    """Write a synthetic task's parquet files once under `cache_dir/data/<task>` (default :func:`demo_cache_dir`)."""
    from verl.utils.synthetic_tasks import write_task_files

    data_dir = (cache_dir or demo_cache_dir()) / "data" / task
    files = {"train": data_dir / "train.parquet", "test": data_dir / "test.parquet"}
    if not all(path.is_file() for path in files.values()):
        files = write_task_files(task, data_dir, train_size=4096, test_size=64, seed=0)
    return files


def prepare_demo_data(cache_dir: Path | None = None) -> dict[str, Path]:
    """Write the target-digit parquet files once under `cache_dir` (default :func:`demo_cache_dir`)."""
    return prepare_task_data(DEMO_TASK, cache_dir)


def _leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


def _override_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    return str(value)


def demo_overrides(cache_dir: Path | None = None) -> list[str]:
    """The demo's settings as Hydra overrides of `ppo_trainer` (what `--config-name demo` composes), with the data
    paths of `cache_dir`; tests and benchmarks start from them."""
    files = prepare_demo_data(cache_dir)
    settings = yaml.safe_load(demo_config_path().read_text())
    settings.pop("defaults", None)
    overrides = []
    for key, value in _leaves(settings):
        if key in _DATA_KEYS:
            value = files[_DATA_KEYS[key]]
        overrides.append(f"{key}={_override_value(value)}")
    return overrides


def replace_overrides(base: list[str], overrides: list[str]) -> list[str]:
    """``base`` with ``overrides`` appended, each taking the place of ``base``'s override of the same key (Hydra
    refuses a key given twice); ``key=null`` restores the config's default."""
    keys = {override.split("=", 1)[0].lstrip("+") for override in overrides}
    return [arg for arg in base if arg.split("=", 1)[0].lstrip("+") not in keys] + list(overrides)


def format_reward_curve(run_dir: str | os.PathLike, key: str = "critic/score/mean", window: int = CURVE_WINDOW) -> str:
    """A text chart of the mean reward per `window` steps, from the run's metrics.jsonl."""
    from verl.utils.tracking import read_metrics

    points = [(record["step"], record[key]) for record in read_metrics(run_dir) if record.get(key) is not None]
    if not points:
        raise ValueError(f"no '{key}' in {Path(run_dir) / 'metrics.jsonl'}")
    lines = [f"reward curve ({key}, mean over {window} steps)", "steps        reward"]
    for start in range(0, len(points), window):
        chunk = points[start : start + window]
        mean = sum(value for _, value in chunk) / len(chunk)
        bar = "#" * round(max(0.0, min(1.0, mean)) * BAR_WIDTH)
        lines.append(f"{chunk[0][0]:>4}-{chunk[-1][0]:<4}   {mean:6.3f} {bar}")
    return "\n".join(lines)
