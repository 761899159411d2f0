"""Score a generation parquet offline: ``python -m verl.trainer.main_eval data.path=<generated.parquet>``.

Input: the file ``main_generation`` / ``main_generation_server`` writes (config ``config/evaluation.yaml``):
a ``data.response_key`` column with the sampled texts of each row, the row's ``data.data_source_key`` and its
``data.reward_model_key`` struct holding ``ground_truth``. Each response is scored by
``custom_reward_function.{path,name}`` when set, else by :func:`verl.utils.reward_score.default_compute_score`; a row
scores the mean of its responses, and the printed metric ``test_score/<data_source>`` is the mean over the rows of
each data source (verl's definition, docs/offline.md).
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

__all__ = ["load_score_fn", "main", "run_eval", "score_rows"]


def load_score_fn(config: DictConfig) -> Callable[..., Any]:
    """``custom_reward_function.{path,name}`` (with its ``reward_kwargs``), or the built-in scorer."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    custom = get_custom_reward_fn(config)
    if custom is not None:
        return custom
    from verl.utils.reward_score import default_compute_score

    return default_compute_score


def _as_score(value: Any, where: str) -> float:
    if isinstance(value, dict):
        if "score" not in value:
            raise ValueError(f"{where}: the reward function returned a dict without 'score': {sorted(value)}")
        value = value["score"]
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: the reward function returned {value!r}, not a number") from None


def score_rows(
    responses: list[Any],
    data_sources: list[str],
    reward_data: list[Any],
    score_fn: Callable[..., Any],
    *,
    path: str = "<data>",
    reward_model_key: str = "reward_model",
) -> dict[str, float]:
    """``{"test_score/<source>": mean over its rows of the row's mean response score}``."""
    per_source: dict[str, list[float]] = defaultdict(list)
    for row, (texts, source, reward) in enumerate(zip(responses, data_sources, reward_data)):
        if hasattr(texts, "tolist"):
            texts = texts.tolist()
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise ValueError(f"row {row} of {path} has no responses")
        if not isinstance(reward, dict) or "ground_truth" not in reward:
            raise ValueError(
                f"data.reward_model_key={reward_model_key!r}: row {row} of {path} holds {reward!r:.80}; "
                "expected a struct with a 'ground_truth' field"
            )
        truth = reward["ground_truth"]
        scores = [_as_score(score_fn(source, text, truth), f"row {row} of {path}") for text in texts]
        per_source[str(source)].append(sum(scores) / len(scores))
    return {f"test_score/{source}": sum(v) / len(v) for source, v in per_source.items()}


def run_eval(config: DictConfig) -> dict[str, float]:
    """Read ``data.path``, score every response and return (and print) verl's metrics."""
    import pandas as pd

    data = config.data
    path = os.path.expanduser(str(data.path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data.path: parquet file {path} does not exist")
    dataset = pd.read_parquet(path)
    for key in ("response_key", "data_source_key", "reward_model_key"):
        column = data[key]
        if column not in dataset.columns:
            raise ValueError(
                f"data.{key}={column!r}: {path} has no such column; its columns are {list(dataset.columns)}"
            )
    metrics = score_rows(
        dataset[data.response_key].tolist(),
        dataset[data.data_source_key].tolist(),
        dataset[data.reward_model_key].tolist(),
        load_score_fn(config),
        path=path,
        reward_model_key=str(data.reward_model_key),
    )
    print(metrics, flush=True)
    return metrics


@hydra.main(config_path="config", config_name="evaluation", version_base=None)
def main(config: DictConfig) -> None:
    OmegaConf.resolve(config)
    try:
        run_eval(config)
    except (OSError, ValueError, AttributeError, ImportError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
