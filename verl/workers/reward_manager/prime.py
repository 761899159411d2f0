"""PrimeRewardManager: PRIME's verifier-style scoring, every sample in parallel scoring processes.

It differs from the naive manager in what PRIME's verifiers expect: the scoring function is called positionally,
``compute_score(data_source, solution_str, ground_truth, extra_info)``, may return a number, a bool or a
``(score, ...)`` tuple, and the batch keeps the scores as an ``acc`` tensor (``verify``), which PRIME's filters read.
A sample whose function raises, times out or returns something else scores 0.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.reward_runner import ScoreOutcome
from verl.workers.reward_manager.base import AbstractRewardManager, Sample
from verl.workers.reward_manager.registry import register

__all__ = ["PrimeRewardManager", "prime_score_value"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300.0


def _default_num_workers() -> int:
    return min(64, os.cpu_count() or 1)


def prime_score_value(result: Any) -> float:
    """A PRIME verifier's return as a float: a number/bool, the first item of a tuple/list, or a dict's ``score``."""
    if isinstance(result, dict):
        result = result["score"]
    elif isinstance(result, tuple | list):
        if not result:
            raise ValueError("a reward function returned an empty sequence")
        result = result[0]
    return float(result)


class _PositionalScore:
    """Calls the user's function positionally (PRIME's convention); pickles with it for the scoring processes."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None) -> Any:
        return self.fn(data_source, solution_str, ground_truth, extra_info)


@register("prime")
class PrimeRewardManager(AbstractRewardManager):
    """PRIME's manager (https://github.com/PRIME-RL/PRIME) over this package's scoring pool.

    ``num_workers`` defaults to ``min(64, cpu count)`` processes and ``timeout_s`` to 300 s per sample, PRIME's
    values; ``main_ppo`` passes ``reward.num_workers``/``reward.timeout_s``.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        *,
        num_workers: int | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(
            tokenizer,
            num_examine,
            compute_score,
            reward_fn_key,
            num_workers=_default_num_workers() if num_workers is None else num_workers,
            timeout_s=timeout_s,
        )
        self.compute_score = _PositionalScore(self.compute_score)

    def score_samples(self, samples: list[Sample]) -> tuple[list[float], list[ScoreOutcome]]:
        outcomes = self.runner.run([self.job(s) for s in samples])
        scores = []
        for index, outcome in enumerate(outcomes):
            score = 0.0
            if outcome.ok:
                try:
                    score = prime_score_value(outcome.value)
                except (KeyError, TypeError, ValueError) as err:
                    outcome.error = f"{type(err).__name__}: {err}"
                    logger.warning(
                        "reward function returned an unusable value on sample %d (scored 0.0): %s", index, outcome.error
                    )
            scores.append(score)
        return scores, outcomes

    def verify(self, data: DataProto) -> list[float]:
        """Score every sample and store the scores in ``data.batch["acc"]`` (float32, one per sample)."""
        scores, _ = self.score_samples(self.decode(data))
        data.batch["acc"] = torch.tensor(scores, dtype=torch.float32, device=data.batch["responses"].device)
        return scores

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = self._extract_reward_from_rm_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        samples = self.decode(data)
        scores, outcomes = self.score_samples(samples)
        data.batch["acc"] = torch.tensor(scores, dtype=torch.float32, device=data.batch["responses"].device)
        reward_tensor = self.place_scores(samples, scores, data.batch["responses"].shape[-1])
        self.examine(samples, scores)
        return self.result(reward_tensor, {}, self.failure_metrics(outcomes), return_dict)
