"""Arithmetic-sequence reward: the fraction of expected next terms the response gives, in order.

Ground truth ``"11,14,17"``; the response is split on commas and compared term by term, so ``"11,14,20"`` scores
2/3. Extra terms after the expected ones are ignored.
"""

from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str) -> float:
    expected = [term.strip() for term in ground_truth.split(",") if term.strip()]
    if not expected:
        raise ValueError(f"arith_seq ground_truth must list comma-separated terms, got {ground_truth!r}")
    given = [term.strip() for term in solution_str.split(",")]
    hits = sum(1 for got, want in zip(given, expected) if got == want)
    return hits / len(expected)
