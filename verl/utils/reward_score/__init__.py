"""Rule-based reward functions and the ``default_compute_score`` dispatcher used by the reward managers.

A reward manager calls ``default_compute_score(data_source, solution_str, ground_truth, extra_info)`` for each
response; ``data_source`` (a column of every verl data set) picks the scorer. Users plug in their own function
with the same signature through the custom-reward-function config.

Scorer modules under verl's names (``math_dapo``, ``math_reward``, ``prime_math``, ``prime_code``,
``sandbox_fusion``, ``geo3k``, ``search_r1_like_qa_em``, ...) are imported
on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import addition, arith_seq, gsm8k, long_tail, target_digit, tool_calc
from . import math as math_light

SYNTHETIC_SCORERS: dict[str, Callable[[str, str], float]] = {
    "synthetic/target_digit": target_digit.compute_score,
    "synthetic/arith_seq": arith_seq.compute_score,
    "synthetic/addition": addition.compute_score,
    "synthetic/long_tail": long_tail.compute_score,
    "synthetic/long_tail_digit": long_tail.compute_score,
    "synthetic/tool_calc": tool_calc.compute_score,
    "synthetic/tool_mul": tool_calc.compute_score,
    "synthetic/tool_mul3": tool_calc.compute_score,
}
GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = (
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "math",
    "math_dapo",
)
# Data sources whose names start with one of these are competition-math sets scored like MATH.
MATH_SOURCE_PREFIXES = ("aime",)
MATH_BACKENDS = ("light", "math_verify")
PRIME_MATH_SOURCES = (
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
)
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
GEO3K_SOURCES = ("hiyouga/geometry3k",)
SEARCH_R1_SOURCES = (
    "searchR1_nq",
    "searchR1_triviaqa",
    "searchR1_popqa",
    "searchR1_hotpotqa",
    "searchR1_2wikimultihopqa",
    "searchR1_musique",
    "searchR1_bamboogle",
)


def known_data_sources() -> list[str]:
    return [
        *SYNTHETIC_SCORERS,
        *GSM8K_SOURCES,
        *MATH_SOURCES,
        *(f"{p}*" for p in MATH_SOURCE_PREFIXES),
        *PRIME_MATH_SOURCES,
        *CODE_SOURCES,
        *GEO3K_SOURCES,
        *SEARCH_R1_SOURCES,
    ]


def _score_math(solution_str: str, ground_truth: str, backend: str) -> float:
    if backend == "light":
        return math_light.compute_score(solution_str, ground_truth)
    if backend == "math_verify":
        from . import math_verify

        return math_verify.compute_score(solution_str, ground_truth)
    raise ValueError(f"math_backend must be one of {MATH_BACKENDS}, got {backend!r}")


def _score_code(
    solution_str: str,
    ground_truth: Any,
    sandbox_fusion_url: str | None,
    concurrent_semaphore: Any,
    memory_limit_mb: int | None,
) -> float:
    if sandbox_fusion_url:
        from . import sandbox_fusion

        return sandbox_fusion.compute_score(
            sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, solution_str, ground_truth, continuous=True
        )[0]
    from . import prime_code

    return float(prime_code.compute_score(solution_str, ground_truth, continuous=True)[0])


def _score_other(data_source: str, solution_str: str, ground_truth: Any, kwargs: dict[str, Any]) -> float | None:
    """Scores of verl's further data sources (None: not one of them)."""
    if data_source in PRIME_MATH_SOURCES:
        from . import prime_math

        return float(prime_math.compute_score(solution_str, ground_truth)[0])
    if data_source in CODE_SOURCES:
        return _score_code(
            solution_str,
            ground_truth,
            kwargs.get("sandbox_fusion_url"),
            kwargs.get("concurrent_semaphore"),
            kwargs.get("memory_limit_mb"),
        )
    if data_source in GEO3K_SOURCES:
        from . import geo3k

        return float(geo3k.compute_score(solution_str, ground_truth))
    if data_source in SEARCH_R1_SOURCES:
        from . import search_r1_like_qa_em

        return float(search_r1_like_qa_em.compute_score(solution_str, ground_truth))
    return None


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Score one response with the rule for its ``data_source``.

    Keyword options: ``math_backend`` ("light", the default, or "math_verify") for math data sets, and
    ``gsm8k_method`` ("strict", the default, or "flexible"). Code data sets (``codecontests``, ``apps``, ...)
    run the program on a SandboxFusion service when ``sandbox_fusion_url`` is given (with verl's
    ``concurrent_semaphore`` and ``memory_limit_mb``), else in the local sandbox; they score the pass rate of the
    first 10 test cases. Other keyword arguments are accepted and ignored, so callers can pass one kwargs dict to
    any scorer.
    """
    if not isinstance(data_source, str):
        raise TypeError(f"data_source must be a str, got {type(data_source).__name__}: {data_source!r}")
    if data_source in SYNTHETIC_SCORERS:
        return SYNTHETIC_SCORERS[data_source](solution_str, ground_truth)
    if data_source in GSM8K_SOURCES:
        return gsm8k.compute_score(solution_str, ground_truth, method=kwargs.get("gsm8k_method", "strict"))
    if data_source in MATH_SOURCES or data_source.startswith(MATH_SOURCE_PREFIXES):
        return _score_math(solution_str, ground_truth, kwargs.get("math_backend", "light"))
    other = _score_other(data_source, solution_str, ground_truth, kwargs)
    if other is not None:
        return other
    raise NotImplementedError(
        f"Reward function is not implemented for data_source={data_source!r}; known data sources: "
        f"{', '.join(known_data_sources())}. Configure a custom reward function for other data sets."
    )


# verl's older name for the same function.
_default_compute_score = default_compute_score

__all__ = [
    "default_compute_score",
    "known_data_sources",
    "SYNTHETIC_SCORERS",
    "GSM8K_SOURCES",
    "MATH_SOURCES",
    "PRIME_MATH_SOURCES",
    "CODE_SOURCES",
    "GEO3K_SOURCES",
    "SEARCH_R1_SOURCES",
]
