"""Addition reward: 1.0 when the response starts with the right integer, else 0.0.

Leading whitespace is allowed and anything after the number is ignored (``"47 because..."`` is right), but the
number must be complete: ``"470"`` is wrong for 47.
"""

from __future__ import annotations

import re

_LEADING_INT = re.compile(r"\s*([+-]?\d+)")


def extract_answer(solution_str: str) -> int | None:
    match = _LEADING_INT.match(solution_str)
    return int(match.group(1)) if match else None


def compute_score(solution_str: str, ground_truth: str) -> float:
    try:
        expected = int(ground_truth.strip())
    except ValueError:
        raise ValueError(f"addition ground_truth must be an integer string, got {ground_truth!r}") from None
    return 1.0 if extract_answer(solution_str) == expected else 0.0
