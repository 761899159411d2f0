"""Validation metrics: per data source and prompt, mean / std / best-of-k / worst-of-k / majority-vote-of-k.

``process_validation_metrics`` groups every sample's values (each key of the reward function's info
dict, e.g. ``reward``, ``acc``, ``pred``) by data source and prompt uid. For a prompt with n samples
it reports ``mean@n`` and ``std@n`` and, for k = 2, 4, 8, ... and n, the expected best and worst of k
samples (``best@k/mean``, ``worst@k/mean`` and their std) estimated by bootstrap resampling; when the
samples carry a ``pred`` (the extracted answer) it adds ``maj@k``, the value of the majority answer.
Prompt-level numbers are then averaged over the prompts of a data source.

``flatten_validation_metrics`` turns that nested result into the logged keys
``val-core/<source>/<var>/<metric>`` (the headline numbers: mean/maj/best at the largest k of the core
variable, ``acc`` when present else ``reward``) and ``val-aux/...`` for the rest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, overload

import numpy as np

__all__ = [
    "bootstrap_metric",
    "calc_maj_val",
    "flatten_validation_metrics",
    "process_validation_metrics",
    "validation_reward_metrics",
]

_VECTORISED: dict[Callable[..., Any], Callable[..., np.ndarray]] = {
    np.max: np.max,
    np.min: np.min,
    np.mean: np.mean,
    np.amax: np.max,
    np.amin: np.min,
}


def bootstrap_metric(
    data: Sequence[Any],
    subset_size: int,
    reduce_fns: Sequence[Callable[[np.ndarray], float]],
    n_bootstrap: int = 1000,
    seed: int = 42,
) -> list[tuple[float, float]]:
    """(mean, std) of each ``reduce_fn`` over ``n_bootstrap`` subsets of ``subset_size`` drawn with replacement.

    E.g. with ``np.max`` this estimates the expected best of ``subset_size`` samples. The draws come from a
    generator seeded with ``seed`` (the global numpy RNG is left alone), so results are reproducible.
    """
    if len(data) == 0:
        raise ValueError("bootstrap_metric needs at least one data point")
    if subset_size < 1 or n_bootstrap < 1:
        raise ValueError(
            f"bootstrap_metric: subset_size and n_bootstrap must be >= 1, got {subset_size}, {n_bootstrap}"
        )
    values = np.empty(len(data), dtype=object)
    values[:] = list(data)
    draws = np.random.default_rng(seed).integers(0, len(values), size=(n_bootstrap, subset_size))
    numeric = all(isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in values)
    results = []
    for fn in reduce_fns:
        if numeric and fn in _VECTORISED:
            stats = _VECTORISED[fn](values.astype(np.float64)[draws], axis=1)
        else:
            stats = np.asarray([fn(values[row]) for row in draws], dtype=np.float64)
        results.append((float(np.mean(stats)), float(np.std(stats))))
    return results


def calc_maj_val(data: Sequence[Mapping[str, Any]], vote_key: str, val_key: str) -> float:
    """``val_key`` of the first sample that voted for the most common ``vote_key`` (ties: the first seen)."""
    votes: dict[Any, list[Any]] = {}
    for item in data:
        votes.setdefault(item[vote_key], []).append(item[val_key])
    winner = max(votes, key=lambda vote: len(votes[vote]))
    return votes[winner][0]


def _bootstrap_sizes(n: int) -> list[int]:
    """2, 4, 8, ... below n, then n itself."""
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return [*sizes, n]


def _prompt_metrics(values: list[Any], preds: list[Any] | None, seed: int) -> dict[str, float]:
    n = len(values)
    metrics = {f"mean@{n}": float(np.mean(values))}
    if n == 1:
        return metrics
    metrics[f"std@{n}"] = float(np.std(values))
    votes = None
    if preds is not None and len(preds) == n and all(p is not None for p in preds):
        votes = [{"val": v, "pred": p} for v, p in zip(values, preds)]
    for k in _bootstrap_sizes(n):
        (best_mean, best_std), (worst_mean, worst_std) = bootstrap_metric(values, k, [np.max, np.min], seed=seed)
        metrics.update(
            {
                f"best@{k}/mean": best_mean,
                f"best@{k}/std": best_std,
                f"worst@{k}/mean": worst_mean,
                f"worst@{k}/std": worst_std,
            }
        )
        if votes is not None:
            majority = partial(calc_maj_val, vote_key="pred", val_key="val")
            [(maj_mean, maj_std)] = bootstrap_metric(votes, k, [majority], seed=seed)
            metrics.update({f"maj@{k}/mean": maj_mean, f"maj@{k}/std": maj_std})
    return metrics


def _count_missing_as_failures(
    grouped: dict[str, dict[str, dict[str, list]]], expected_acc_counts: Mapping[tuple[str, str], int]
) -> None:
    """Sessions that produced no sample count as ``acc = 0`` (``acc_success_only`` keeps the observed ones).

    Only data sources that report ``acc`` at all take part, so a reward-only source gets no made-up accuracy.
    """
    with_acc = {
        source
        for source, prompts in grouped.items()
        if any(v is not None for per_var in prompts.values() for v in per_var.get("acc", []))
    }
    for (source, uid), expected in expected_acc_counts.items():
        if source not in with_acc:
            continue
        per_var = grouped[source][uid]
        observed = [v for v in per_var.get("acc", []) if v is not None]
        per_var["acc_success_only"] = observed
        per_var["acc"] = observed + [0.0] * max(int(expected) - len(observed), 0)


def _legacy_call(infos_dict: Any) -> bool:
    return not isinstance(infos_dict, Mapping)


@overload
def process_validation_metrics(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos_dict: Mapping[str, Sequence[Any]],
    seed: int = ...,
    expected_acc_counts: Mapping[tuple[str, str], int] | None = ...,
) -> dict[str, dict[str, dict[str, float]]]: ...


@overload
def process_validation_metrics(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos_dict: Sequence[float],
    seed: int = ...,
    expected_acc_counts: Mapping[tuple[str, str], int] | None = ...,
) -> dict[str, float]: ...


def process_validation_metrics(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos_dict: Mapping[str, Sequence[Any]] | Sequence[float],
    seed: int = 42,
    expected_acc_counts: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, dict[str, dict[str, float]]] | dict[str, float]:
    """``{data_source: {variable: {metric: value}}}`` from per-sample values (see the module docstring).

    ``infos_dict`` maps each variable to one value per sample (``None`` = not reported); string-valued
    variables (``pred``) are only used for majority voting. ``expected_acc_counts[(source, uid)]`` is the
    number of sessions a prompt should have had: the missing ones count as failures in ``acc``.

    Called the older way, with a plain list of scores as the third argument, it returns the flat
    ``val-core`` / ``val-aux`` reward metrics of :func:`validation_reward_metrics`.
    """
    if not isinstance(infos_dict, Mapping):  # the legacy call (_legacy_call)
        return validation_reward_metrics(data_sources, sample_uids, infos_dict)
    grouped: dict[str, dict[str, dict[str, list]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for row, (source, uid) in enumerate(zip(data_sources, sample_uids)):
        for name, column in infos_dict.items():
            grouped[source][uid][name].append(column[row])
    if expected_acc_counts:
        _count_missing_as_failures(grouped, expected_acc_counts)

    per_source: dict[str, dict[str, dict[str, list[float]]]] = {}
    for source, prompts in grouped.items():
        collected = per_source.setdefault(source, {})
        for per_var in prompts.values():
            preds = per_var.get("pred")
            for name, raw in per_var.items():
                values = [v for v in raw if v is not None]
                if not values or isinstance(values[0], str):
                    continue
                for metric, value in _prompt_metrics(values, preds, seed).items():
                    collected.setdefault(name, {}).setdefault(metric, []).append(value)
    return {
        source: {
            name: {metric: float(np.mean(vals)) for metric, vals in metrics.items()}
            for name, metrics in variables.items()
        }
        for source, variables in per_source.items()
    }


def flatten_validation_metrics(nested: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, float]:
    """The logged keys of :func:`process_validation_metrics`'s result (``val-core/...`` and ``val-aux/...``)."""
    flat: dict[str, float] = {}
    for source, variables in nested.items():
        core_var = "acc" if "acc" in variables else "reward"
        for name, metrics in variables.items():
            largest = max(int(metric.split("@")[-1].split("/")[0]) for metric in metrics)
            for metric, value in metrics.items():
                headline = name == core_var and metric.startswith(("mean", "maj", "best")) and f"@{largest}" in metric
                flat[f"{'val-core' if headline else 'val-aux'}/{source}/{name}/{metric}"] = value
    return flat


def validation_reward_metrics(
    data_sources: Sequence[str], uids: Sequence[str], scores: Sequence[float], pass_threshold: float = 1.0
) -> dict[str, float]:
    """Flat reward metrics per data source: ``val-core/<source>/reward/mean@n`` and, in ``val-aux``, the mean
    over prompts of the best / worst of their n samples and pass@n (any sample >= ``pass_threshold``)."""
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for source, uid, score in zip(data_sources, uids, scores):
        groups[source][uid].append(float(score))
    metrics: dict[str, float] = {}
    for source, by_prompt in groups.items():
        n = max(len(v) for v in by_prompt.values())
        per_prompt = [np.asarray(v) for v in by_prompt.values()]
        metrics[f"val-core/{source}/reward/mean@{n}"] = float(np.mean([v.mean() for v in per_prompt]))
        if n > 1:
            metrics[f"val-aux/{source}/reward/best@{n}"] = float(np.mean([v.max() for v in per_prompt]))
            metrics[f"val-aux/{source}/reward/worst@{n}"] = float(np.mean([v.min() for v in per_prompt]))
        metrics[f"val-aux/{source}/reward/pass@{n}"] = float(np.mean([(v >= pass_threshold).any() for v in per_prompt]))
    return metrics
