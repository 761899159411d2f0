"""Symbolic math checker backed by the optional ``math-verify`` package (``pip install verl[math]``).

The import is lazy so that verl works without it; only calling this scorer needs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = "math-verify is not installed; install it with `pip install verl[math]` (or `pip install math-verify`)"


def _load_math_verify() -> ModuleType:
    try:
        return importlib.import_module("math_verify")
    except ImportError as err:
        raise ImportError(f"verl.utils.reward_score.math_verify needs it: {INSTALL_HINT}") from err


def compute_score(solution_str: str, ground_truth: str, timeout_score: float = 0.0) -> float:
    """1.0 when math-verify finds the response's final answer equivalent to ``ground_truth``, else 0.0.

    The ground truth is wrapped in ``\\boxed{}`` so bare answers such as ``\\frac{1}{2}`` parse as LaTeX.
    ``timeout_score`` is returned when math-verify fails or times out on a pathological expression.
    """
    mv = _load_math_verify()
    truth = ground_truth if "\\boxed" in ground_truth else f"\\boxed{{{ground_truth}}}"
    try:
        gold = mv.parse(truth)
        answer = mv.parse(solution_str)
        return 1.0 if gold and answer and mv.verify(gold, answer) else 0.0
    except Exception:  # math-verify raises its own timeout and parser errors on odd input
        return timeout_score
