"""DAPO's math reward: +1 for a correct final answer, -1 otherwise (``data_source`` ``math_dapo``, ``aime*``).

The answer is read from an ``Answer: ...`` line (Minerva style) or, failing that, from the last ``\\boxed{}`` of
the response's last 300 characters; both sides go through Minerva's final-answer normalisation (Lewkowycz et al.,
2022, appendix D.1: strip units and words, unwrap ``\\text{}``/``\\boxed{}``, brace bare ``\\frac``/``\\sqrt``
arguments, drop thousands separators) and must then be equal as strings. ``compute_score`` returns a dict:
``score`` (+1/-1), ``acc`` (bool) and ``pred`` (the normalised prediction).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "compute_score",
    "is_correct_minerva",
    "is_correct_strict_box",
    "last_boxed_only_string",
    "normalize_final_answer",
    "remove_boxed",
    "verify",
]

_BOXED = "\\boxed{"
_TAIL_CHARS = 300  # MATH-500's longest answer has 159 characters
_STRICT_WINDOW = 100
INVALID = "[INVALID]"

# Minerva's normalisation: literal replacements first, then text removed wherever it occurs.
SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
REMOVED_EXPRESSIONS: tuple[str, ...] = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)
_UNWRAP = (
    re.compile(r"\\text\{(.*?)\}"),
    re.compile(r"\\textbf\{(.*?)\}"),
    re.compile(r"\\overline\{(.*?)\}"),
    re.compile(r"\\boxed\{(.*)\}"),
)


def last_boxed_only_string(string: str) -> str | None:
    """The last ``\\boxed{...}`` of ``string`` with balanced braces, or None."""
    start = string.rfind(_BOXED)
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(string)):
        if string[end] == "{":
            depth += 1
        elif string[end] == "}":
            depth -= 1
            if depth == 0:
                return string[start : end + 1]
    return None


def remove_boxed(s: str) -> str:
    """``\\boxed{x}`` -> ``x``; anything else is a caller error."""
    if not (s.startswith(_BOXED) and s.endswith("}")):
        raise AssertionError(f"not a \\boxed{{...}} expression: {s!r}")
    return s[len(_BOXED) : -1]


def normalize_final_answer(final_answer: str) -> str:
    """Minerva's canonical form of a final answer (see the module docstring)."""
    answer = final_answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        answer = answer.replace(before, after)
    for text in REMOVED_EXPRESSIONS:
        answer = answer.replace(text, "")
    answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$", answer)  # keep the first $...$ span only
    for pattern in _UNWRAP:
        answer = pattern.sub(r"\1", answer)
    answer = re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", answer)  # \frac12 -> \frac{1}{2}
    answer = re.sub(r"(sqrt)([^{])", r"sqrt{\2}", answer)  # \sqrt2 -> \sqrt{2}
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def is_correct_minerva(
    solution_str: str, gt: str, gt_need_extract: bool = False, answer_pattern: str = r"(?i)Answer\s*:\s*([^\n]+)"
) -> tuple[bool, str]:
    """``(correct, prediction)`` from the last ``answer_pattern`` match (``[INVALID]`` when there is none);
    ``gt_need_extract``: the ground truth is a solution whose last ``\\boxed{}`` holds the answer."""
    matches = re.findall(answer_pattern, solution_str)
    prediction = normalize_final_answer(matches[-1] if matches else INVALID)
    if gt_need_extract:
        boxed = last_boxed_only_string(gt)
        if boxed is None:
            raise ValueError(f"gt_need_extract=True but the ground truth has no \\boxed{{}}: {gt[:80]!r}")
        gt = remove_boxed(boxed)
    return prediction == normalize_final_answer(gt), prediction


def is_correct_strict_box(pred: str, gt: str, pause_tokens_index: list[int] | None = None) -> tuple[int, str | None]:
    """``(1 or -1, boxed content)``: the last ``\\boxed{}`` of the response's end must equal ``gt`` verbatim.
    The end is the last 100 characters, or from 100 characters before the fourth pause token when given."""
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index must hold 4 positions, got {pause_tokens_index!r}")
        tail = pred[pause_tokens_index[-1] - _STRICT_WINDOW :]
    else:
        tail = pred[-_STRICT_WINDOW:]
    boxed = last_boxed_only_string(tail)
    extracted = remove_boxed(boxed) if boxed is not None else None
    return (1 if extracted == gt else -1), extracted


def verify(
    solution_str: str, answer: str, strict_box_verify: bool = False, pause_tokens_index: list[int] | None = None
) -> tuple[bool, str | None]:
    """``(correct, prediction)``: the ``Answer:`` line first, the last ``\\boxed{}`` when there is none;
    ``strict_box_verify`` uses only the box, compared verbatim."""
    if strict_box_verify:
        verdict, boxed = is_correct_strict_box(solution_str, answer, pause_tokens_index)
        return verdict == 1, boxed
    correct, prediction = is_correct_minerva(solution_str, answer)
    if prediction != INVALID:
        return correct, prediction
    verdict, boxed = is_correct_strict_box(solution_str, answer, pause_tokens_index)
    if boxed is not None:
        return verdict == 1, boxed
    return correct, prediction


def compute_score(
    solution_str: str, ground_truth: str, strict_box_verify: bool = False, pause_tokens_index: list[int] | None = None
) -> dict[str, Any]:
    """``{"score": 1.0 | -1.0, "acc": bool, "pred": str | None}`` for the response's last 300 characters."""
    correct, prediction = verify(solution_str[-_TAIL_CHARS:], ground_truth, strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": prediction}
