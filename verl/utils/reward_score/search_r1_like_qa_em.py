"""Exact-match QA reward for Search-R1-style data (``data_source`` ``searchR1_*``).

The answer is the text of the last ``<answer>...</answer>`` block; it matches a gold answer when both are equal
after normalisation (lower case, no punctuation, no articles, single spaces). A response that spams answer tags
(more than :data:`MAX_ANSWER_TAGS` of either kind) earns a quarter of the score even when correct.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import Any

__all__ = [
    "compute_score",
    "compute_score_subem",
    "count_answer_tags",
    "em_check",
    "extract_solution",
    "normalize_answer",
    "subem_check",
]

MAX_ANSWER_TAGS = 10
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golden(golden_answers: str | Iterable[str]) -> list[str]:
    answers = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
    return [normalize_answer(str(answer)) for answer in answers]


def em_check(prediction: str, golden_answers: str | Iterable[str]) -> int:
    """1 when the normalised prediction equals a normalised gold answer."""
    predicted = normalize_answer(prediction)
    return int(predicted in _golden(golden_answers))


def subem_check(prediction: str, golden_answers: str | Iterable[str]) -> int:
    """1 when a normalised gold answer occurs inside the normalised prediction."""
    predicted = normalize_answer(prediction)
    return int(any(answer in predicted for answer in _golden(golden_answers)))


def extract_solution(solution_str: str) -> str | None:
    """The stripped text of the last answer block, or None without one."""
    blocks = _ANSWER.findall(solution_str)
    return blocks[-1].strip() if blocks else None


def count_answer_tags(text: str) -> tuple[int, int]:
    return text.count("<answer>"), text.count("</answer>")


def compute_score(
    solution_str: str,
    ground_truth: dict[str, Any],
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` for an exact match (a quarter of it under tag spamming), ``format_score`` for a wrong answer in
    an answer block, 0 without one. ``method`` is verl's argument; only strict extraction exists."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    if not em_check(answer, ground_truth["target"]):
        return format_score
    opening, closing = count_answer_tags(solution_str)
    return score / 4 if max(opening, closing) > MAX_ANSWER_TAGS else score


def compute_score_subem(
    solution_str: str,
    ground_truth: dict[str, Any],
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """As :func:`compute_score` with the substring match and no tag-spam penalty."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    return score if subem_check(answer, ground_truth["target"]) else format_score
