"""Long-tail reward: position-by-position matches with the ground truth, over the longer of response and answer.

The answer's length is part of the task (``"7x37:"`` asks for 37 sevens), so both stopping early and running on
cost reward: a response of the right digit and the right length scores 1. Matching characters give partial credit
from the first random samples, as in the target-digit task.
"""

from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str) -> float:
    if not ground_truth:
        raise ValueError("long_tail ground_truth must be a non-empty string")
    hits = sum(1 for got, want in zip(solution_str, ground_truth) if got == want)
    return hits / max(len(solution_str), len(ground_truth))
