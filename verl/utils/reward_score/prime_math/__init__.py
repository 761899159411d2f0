"""PRIME's math reward (``data_source`` ``numina_*``): find the final answer in free text and grade it leniently.

:func:`match_answer` finds the answer (after "answer:"/"the answer is", in the last ``\\boxed{}``, after a final
"is"/"="); :func:`grade_answer` accepts it when it normalises to the ground truth's MATH form or when sympy proves
the two equal (element-wise for tuples, fractions must match as written, integers must match exactly);
:func:`~.grader.math_equal` is the numeric/symbolic fallback. ``compute_score`` returns
``(correct, format_correct, extracted_answer)``; ``format_correct`` means the response used PRIME's
"Step 2:" layout with a box.
"""

from __future__ import annotations

import math
import re

from verl.utils.reward_score.prime_math import math_normalize
from verl.utils.reward_score.prime_math.grader import _time_limit, latex_to_text, math_equal

__all__ = ["compute_score", "grade_answer", "match_answer", "remove_boxed", "should_allow_eval", "split_tuple"]

_TUPLE_CHARS = "()[]"
_UNITS = (
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
    "liter",
)
_SCALES = {"million": "*10^6", "billion": "*10^9", "trillion": "*10^12"}
_BAD_SUBSTRINGS = ("^{", "^(")
_BAD_REGEXES = (r"\^[0-9]+\^", r"\^[0-9][0-9]+")
_SYMPY_SECONDS = 10.0


def remove_boxed(s: str) -> str | None:
    """``\\boxed{x}`` -> ``x``; None for anything else."""
    prefix = "\\boxed{"
    return s[len(prefix) : -1] if s.startswith(prefix) and s.endswith("}") else None


def _last_boxed_content(text: str) -> str | None:
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    open_at = text.find("{", start)
    if open_at < 0:
        return None
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i].strip()
    return None


def _cut_after(text: str, markers: tuple[str, ...]) -> tuple[bool, str]:
    found = False
    for marker in markers:
        at = text.lower().rfind(marker)
        if at != -1:
            found, text = True, text[at + len(marker) :].strip()
    return found, text


def match_answer(response: str) -> tuple[bool, str]:
    """``(found, answer)``: the answer text extracted from a response; ``found`` needs a digit in it."""
    matched, text = _cut_after(response, ("answer:", "answer is", "answers are"))
    for marker in ("is answer", "is the answer", "are answers", "are the answers"):
        at = text.lower().rfind(marker)
        if at != -1:
            matched, text = True, text[:at].strip()
    boxed = _last_boxed_content(text)
    if boxed:
        matched, text = True, boxed
    dot = text.rfind(". ")
    if dot != -1:
        text = text[:dot].strip()
    found, text = _cut_after(text, ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n"))
    matched = (matched or found) and any(c.isdigit() for c in text)
    return matched, text


def _strip_thousands(expr: str) -> str:
    previous = None
    while previous != expr:
        previous, expr = expr, re.sub(r"(\d),(\d\d\d)($|\D)", r"\1\2\3", expr)
    return expr


def _is_int_text(text: str) -> bool:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return False
    return math.isfinite(value) and abs(value - round(value)) <= 1e-7


def _normalize(expr: str | None) -> str | None:
    """The answer as plain, lower-case, sympy-friendly text (units, ``$``, ``%`` and LaTeX removed)."""
    if expr is None:
        return None
    whole_text = re.fullmatch(r"\\text\{(.+?)\}", expr)
    if whole_text:
        expr = whole_text.group(1)
    expr = expr.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    for word, factor in _SCALES.items():
        expr = expr.replace(word, factor)
    for unit in _UNITS:
        expr = re.sub(f"{unit}(es)?(s)? *(\\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _is_int_text(expr):
        expr = str(round(float(expr.replace(",", ""))))
    if "\\" in expr:
        try:
            expr = latex_to_text(expr)
        except ValueError:
            pass
    expr = re.sub(r"- *", "-", expr)
    expr = re.sub(r"([0-9]) +([0-9])", r"\1+\2", expr)  # mixed numbers: 7 3/4 -> 7+3/4
    expr = expr.lower().strip()
    if _is_int_text(expr):
        expr = str(round(float(expr.replace(",", ""))))
    return expr


def split_tuple(expr: str) -> list[str]:
    """Elements of a tuple/interval ``(a, b)``, else the expression alone (thousands separators kept intact)."""
    expr = _strip_thousands(expr)
    if not expr:
        return []
    inner = expr[1:-1]
    if (
        len(expr) > 2
        and expr[0] in _TUPLE_CHARS
        and expr[-1] in _TUPLE_CHARS
        and not any(c in inner for c in _TUPLE_CHARS)
    ):
        return [e.strip() for e in inner.split(",")]
    return [expr]


def should_allow_eval(expr: str) -> bool:
    """Whether sympy may evaluate ``expr``: at most two unknown letters and no huge powers."""
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or any(bad in expr for bad in _BAD_SUBSTRINGS):
        return False
    return not any(re.search(pattern, expr) for pattern in _BAD_REGEXES)


def _sympy_equal(truth: str, given: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    expr = f"({truth})-({given})"
    if not should_allow_eval(expr):
        return False
    try:
        with _time_limit(_SYMPY_SECONDS):
            transformations = (*standard_transformations, implicit_multiplication_application, convert_xor)
            return sympy.simplify(parse_expr(expr.replace("^", "**"), transformations=transformations)) == 0
    except Exception:  # noqa: BLE001 - an expression sympy cannot handle is not a match
        return False


def _is_fraction(text: str) -> bool:
    return re.fullmatch(r"-?[0-9]+.?/0*[1-9][0-9]*.?", text) is not None


def grade_answer(given_answer: str | None, ground_truth: str) -> bool:
    """Whether ``given_answer`` is right: same MATH normal form, same plain form, or (element-wise) equal under
    sympy, with unreduced fractions and integer answers held to their exact form."""
    if given_answer is None:
        return False
    if math_normalize.normalize_answer(ground_truth) == math_normalize.normalize_answer(given_answer):
        return True
    truth, given = _normalize(ground_truth), _normalize(given_answer)
    if truth is None or given is None:
        return False
    if truth == given:
        return True
    if not given:
        return False
    truth_parts, given_parts = split_tuple(truth), split_tuple(given)
    if len(truth_parts) != len(given_parts):
        return False
    if len(truth_parts) > 1 and (truth[0] != given[0] or truth[-1] != given[-1]):
        return False  # (a, b) vs [a, b]: a different interval
    for t, g in zip(truth_parts, given_parts, strict=True):
        if _is_fraction(t) and _is_fraction(g):
            ok = t == g
        elif _is_int_text(t) != _is_int_text(g):
            ok = False
        else:
            ok = _sympy_equal(t, g)
        if not ok:
            return False
    return True


def compute_score(model_output: str, ground_truth: str) -> tuple[bool, bool, str]:
    """``(correct, format_correct, extracted_answer)`` of one response."""
    model_output, ground_truth = str(model_output), str(ground_truth)
    _, extracted = match_answer(model_output)
    format_correct = "Step 2:" in model_output and "\\box" in model_output
    if grade_answer(extracted, ground_truth):
        return True, True, extracted
    try:
        if "\\pi" in extracted or "\\pi" in ground_truth:
            correct = any(math_equal(extracted, ground_truth, timeout=True, pi=pi) for pi in (math.pi, 3.14))
        else:
            correct = math_equal(extracted, ground_truth, timeout=True)
    except Exception:  # noqa: BLE001 - grading never fails a training step
        correct = False
    return correct, format_correct, extracted
