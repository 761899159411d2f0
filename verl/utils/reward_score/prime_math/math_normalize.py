"""The MATH data set's string normalisation (Hendrycks et al.), as used by PRIME's grader: the light checker's
:func:`verl.utils.reward_score.math.normalize_answer`, made None-safe."""

from __future__ import annotations

from verl.utils.reward_score.math import normalize_answer as _normalize

__all__ = ["normalize_answer"]


def normalize_answer(answer: str | None) -> str | None:
    """Canonical text of ``answer`` (None stays None)."""
    if answer is None:
        return None
    return _normalize(answer)
