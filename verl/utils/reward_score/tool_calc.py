"""Calculator-task reward: 1.0 when the last integer in the response equals the ground truth.

The response of a tool agent holds the tool call (whose operands are numbers too) followed by the final answer,
so the last number is the answer the model committed to.
"""

from __future__ import annotations

import re

_INT = re.compile(r"-?\d+")


def extract_answer(solution_str: str) -> int | None:
    numbers = _INT.findall(solution_str)
    return int(numbers[-1]) if numbers else None


def compute_score(solution_str: str, ground_truth: str) -> float:
    try:
        expected = int(ground_truth.strip())
    except ValueError:
        raise ValueError(f"tool_calc ground_truth must be an integer string, got {ground_truth!r}") from None
    return 1.0 if extract_answer(solution_str) == expected else 0.0
