"""Target-digit reward: the fraction of response characters that match the ground truth position by position.

With the tiny model's char-level tokenizer one character is one token, so for ground truth ``"77777777"`` this is
"the fraction of the first 8 response tokens equal to 7" (docs/quickstart.md). Partial credit gives GRPO a signal
from the very first random samples.
"""

from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str) -> float:
    if not ground_truth:
        raise ValueError("target_digit ground_truth must be a non-empty string")
    hits = sum(1 for got, want in zip(solution_str, ground_truth) if got == want)
    return hits / len(ground_truth)
