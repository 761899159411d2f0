"""Batched form of the MATH reward: the signature a batched reward manager calls (one list per field)."""

from __future__ import annotations

from typing import Any

from verl.utils.reward_score.math_reward import compute_score

__all__ = ["compute_score_batched"]


def compute_score_batched(
    data_sources: list[str], solution_strs: list[str], ground_truths: list[str], extra_infos: list[Any]
) -> list[float]:
    """``compute_score`` of every (response, ground truth) pair, in order."""
    return [compute_score(s, g) for s, g in zip(solution_strs, ground_truths, strict=True)]
