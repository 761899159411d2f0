"""Geometry3K reward (``data_source`` ``hiyouga/geometry3k``): 90% answer accuracy + 10% format.

Accuracy: the last ``\\boxed{}`` (or the whole response with ``use_boxed=False``) graded against the ground truth
with PRIME's lenient math grader. Format: the response is ``<think>...</think>`` followed by a ``\\boxed{}``.
"""

from __future__ import annotations

import re

from verl.utils.reward_score.math import last_boxed_only_string, remove_boxed
from verl.utils.reward_score.prime_math import grade_answer

__all__ = ["acc_reward", "compute_score", "extract_boxed_content", "format_reward"]

_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def extract_boxed_content(text: str) -> str:
    """The content of the last ``\\boxed{}``, or ``"None"`` (what verl's grader library returns)."""
    boxed = last_boxed_only_string(text)
    return remove_boxed(boxed) if boxed is not None else "None"


def format_reward(predict_str: str) -> float:
    return 1.0 if _FORMAT.fullmatch(predict_str) else 0.0


def acc_reward(predict_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    answer = extract_boxed_content(predict_str) if use_boxed else predict_str
    return 1.0 if grade_answer(answer, ground_truth) else 0.0


def compute_score(predict_str: str, ground_truth: str, use_boxed: bool = True, format_score: float = 0.1) -> float:
    return (1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed) + format_score * format_reward(
        predict_str
    )
