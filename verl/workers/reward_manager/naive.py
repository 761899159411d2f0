"""NaiveRewardManager: call the scoring function once per sample (in the process pool)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.reward_runner import ScoreOutcome
from verl.workers.reward_manager.base import AbstractRewardManager, Sample, score_value
from verl.workers.reward_manager.registry import register

__all__ = ["NaiveRewardManager"]

logger = logging.getLogger(__name__)


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    """``compute_score(data_source, solution_str, ground_truth, extra_info)`` per sample; a float or a dict with
    ``score`` (other keys become ``reward_extra_info``)."""

    def score_samples(self, samples: list[Sample]) -> tuple[list[float], list[dict[str, Any]], list[ScoreOutcome]]:
        outcomes = self.runner.run([self.job(s) for s in samples])
        scores, extras = [], []
        for index, outcome in enumerate(outcomes):
            score, extra = 0.0, {}
            if outcome.ok:
                try:
                    score, extra = score_value(outcome.value)
                except (TypeError, ValueError) as err:
                    outcome.error = f"{type(err).__name__}: {err}"
                    logger.warning("reward function failed on sample %d (scored 0.0): %s", index, outcome.error)
            scores.append(score)
            extras.append(extra)
        return scores, extras, outcomes

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = self.from_rm_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        samples = self.decode(data)
        scores, extras, outcomes = self.score_samples(samples)
        reward_tensor = self.place_scores(samples, scores, data.batch["responses"].shape[-1])
        self.examine(samples, scores)
        return self.result(reward_tensor, self.collect_extra(extras), self.failure_metrics(outcomes), return_dict)
