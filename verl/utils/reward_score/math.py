"""Light MATH-style checker: take the last ``\\boxed{...}`` of the response, normalise both sides, compare.

No dependency beyond the standard library. It handles the usual surface differences (``\\dfrac``/``\\tfrac``,
``\\left``/``\\right``, spaces, ``$``, degree signs, trailing units in ``\\text{}``, ``x = `` prefixes, ``0.5`` vs
``\\frac{1}{2}``, ``1,000`` vs ``1000``); for symbolic equivalence install math-verify (``verl[math]``) and use
``verl.utils.reward_score.math_verify``.
"""

from __future__ import annotations

import re
from fractions import Fraction


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced) or ``\\boxed x`` in ``text``, or None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    head = "\\boxed" if text.startswith("\\boxed", start) else "\\fbox"
    rest = text[start + len(head) :]
    if rest.startswith(" "):
        # "\boxed 5": the argument runs to the next "$" or whitespace.
        arg = re.match(r" +([^\s$]+)", rest)
        return f"{head} {arg.group(1)}" if arg else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return head + rest[: i + 1]
    return None


def remove_boxed(boxed: str) -> str:
    """``\\boxed{x}`` -> ``x``; ``\\boxed x`` -> ``x``."""
    for head in ("\\boxed", "\\fbox"):
        if boxed.startswith(head + " "):
            return boxed[len(head) + 1 :]
        if boxed.startswith(head + "{") and boxed.endswith("}"):
            return boxed[len(head) + 1 : -1]
    raise ValueError(f"not a boxed expression: {boxed!r}")


def _brace_fracs(s: str) -> str:
    # \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac{1}2 -> \frac{1}{2}
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    return re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)


def normalize_answer(answer: str) -> str:
    """Canonical text for an answer, so that equal answers written differently compare equal."""
    s = answer.strip().replace("\n", "").replace("\\!", "")
    s = s.replace("\\\\", "\\").replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    # Units: a trailing \text{...} / \mbox{...} after a value ("5 \text{ cm}").
    s = re.sub(r"(.+?)\s*\\(?:text|mbox)\{[^{}]*\}\s*$", r"\1", s)
    s = re.sub(r"\\(?:text|mbox|mathrm|textbf)\{([^{}]*)\}", r"\1", s)
    s = s.replace(" ", "").replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    # "x=5" / "k=5" -> "5" (a short left-hand side is a variable name, not part of the answer).
    if s.count("=") == 1 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = _brace_fracs(s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    s = re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", s)
    s = s.rstrip(".")
    if re.fullmatch(r"-?\d+/\d+", s):
        num, den = s.split("/")
        s = f"\\frac{{{num}}}{{{den}}}" if not num.startswith("-") else f"-\\frac{{{num[1:]}}}{{{den}}}"
    return s


def _as_number(s: str) -> Fraction | None:
    """Exact value of an integer, decimal or integer fraction, else None."""
    match = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", s)
    if match:
        if int(match.group(3)) == 0:
            return None
        value = Fraction(int(match.group(2)), int(match.group(3)))
        return -value if match.group(1) else value
    if re.fullmatch(r"-?\d+(\.\d+)?", s):
        return Fraction(s)
    return None


def is_equiv(a: str | None, b: str | None, verbose: bool = False) -> bool:
    """Whether two answers are equal after normalisation (or as exact numbers); ``verbose`` prints both forms."""
    if a is None or b is None:
        return a is None and b is None
    na, nb = normalize_answer(a), normalize_answer(b)
    if verbose:
        print(na, nb)
    if na == nb:
        return True
    va, vb = _as_number(na), _as_number(nb)
    return va is not None and va == vb


# verl's name for the normaliser of the MATH checker.
strip_string = normalize_answer


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last boxed answer of the response equals ``ground_truth`` (boxed or bare), else 0.0."""
    boxed = last_boxed_only_string(solution_str)
    if boxed is None:
        return 0.0
    truth_boxed = last_boxed_only_string(ground_truth)
    truth = remove_boxed(truth_boxed) if truth_boxed else ground_truth
    return 1.0 if is_equiv(remove_boxed(boxed), truth) else 0.0
