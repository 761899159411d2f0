"""BatchRewardManager: call the scoring function once with lists (for scorers that batch, e.g. a remote verifier)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.reward_runner import ScoreOutcome
from verl.utils.reward_score import default_compute_score
from verl.workers.reward_manager.base import AbstractRewardManager, score_value
from verl.workers.reward_manager.registry import register

__all__ = ["BatchRewardManager", "default_batch_compute_score"]

logger = logging.getLogger(__name__)


def default_batch_compute_score(
    data_sources: list, solution_strs: list, ground_truths: list, extra_infos: list, **kwargs: Any
) -> list:
    """``default_compute_score`` over lists, so the batch manager works without a custom function."""
    return [
        default_compute_score(ds, sol, gt, info, **kwargs)
        for ds, sol, gt, info in zip(data_sources, solution_strs, ground_truths, extra_infos)
    ]


@register("batch")
class BatchRewardManager(AbstractRewardManager):
    """``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)`` -> one score per sample.

    The whole batch is one call, so ``timeout_s`` bounds the batch; if the call raises or times out, every sample in it
    scores 0 and counts as failed.
    """

    def default_score_fn(self) -> Callable[..., Any]:
        return default_batch_compute_score

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = self.from_rm_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        samples = self.decode(data)
        job = {
            "data_sources": [s.data_source for s in samples],
            "solution_strs": [s.response_str for s in samples],
            "ground_truths": [s.ground_truth for s in samples],
            "extra_infos": [s.extra_info for s in samples],
        }
        describe = lambda _: f"the batch of {len(samples)} samples"  # noqa: E731
        outcome = self.runner.run([job], describe=describe)[0] if samples else ScoreOutcome(value=[])
        scores, extras = [0.0] * len(samples), [{} for _ in samples]
        if outcome.ok:
            try:
                values = list(outcome.value)
                if len(values) != len(samples):
                    raise ValueError(f"batch reward function returned {len(values)} scores for {len(samples)} samples")
                for i, value in enumerate(values):
                    scores[i], extras[i] = score_value(value)
            except (TypeError, ValueError) as err:
                outcome.error = f"{type(err).__name__}: {err}"
                scores, extras = [0.0] * len(samples), [{} for _ in samples]
                logger.warning(
                    "batch reward function failed on all %d samples (scored 0.0): %s", len(samples), outcome.error
                )
        reward_tensor = self.place_scores(samples, scores, data.batch["responses"].shape[-1])
        self.examine(samples, scores)
        metrics = self.failure_metrics([outcome], weight=len(samples))
        return self.result(reward_tensor, self.collect_extra(extras), metrics, return_dict)
