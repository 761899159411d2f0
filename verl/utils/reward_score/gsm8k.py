"""GSM8K reward, following verl's documented scoring.

``strict``: the answer is the last number written after ``"#### "`` (the GSM8K answer format), so the model is
also graded on following the format. ``flexible``: the answer is the last number anywhere in the response.
Commas and dollar signs inside the number are dropped before comparing with the ground truth.
"""

from __future__ import annotations

import re

_STRICT = re.compile(r"#### (-?[0-9.,$]+)")
_ANY_NUMBER = re.compile(r"-?[0-9.,]+")
# Only the end of a long response is searched: the answer sits there, and regexes over whole essays are slow.
_TAIL_CHARS = 300
METHODS = ("strict", "flexible")


def _clean(number: str) -> str:
    return number.replace(",", "").replace("$", "").rstrip(".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    if method not in METHODS:
        raise ValueError(f"gsm8k method must be one of {METHODS}, got {method!r}")
    tail = solution_str[-_TAIL_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        return _clean(found[-1]) if found else None
    for candidate in reversed(_ANY_NUMBER.findall(tail)):
        cleaned = _clean(candidate)
        if cleaned not in ("", "-", "."):
            return cleaned
    return None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """``score`` for the right answer, ``format_score`` for a wrong but extractable one, 0.0 for none."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answer == _clean(str(ground_truth).strip()) else format_score
