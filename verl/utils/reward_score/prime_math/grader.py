"""Numeric and symbolic equality of two answers (PRIME's ``math_equal``), with sympy.

Answers are compared as text first, then as numbers (relative tolerance; with ``include_percentage`` the
reference may also be read as a percentage: x, x/100 and 100x all count), then element by element for tuples and
intervals, and finally symbolically: both sides are converted from LaTeX to sympy syntax and their difference must
simplify to 0. Symbolic work runs under a time limit (in the main thread; elsewhere the size guards alone apply).
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["is_digit", "latex_to_text", "math_equal", "symbolic_equal"]

_MAX_CHARS = 1000
_SIMPLE_COMMANDS = {
    "\\cdot": "*",
    "\\times": "*",
    "\\div": "/",
    "\\pi": "pi",
    "\\infty": "oo",
    "\\left": "",
    "\\right": "",
    "\\!": "",
    "\\,": "",
    "\\;": "",
    "\\ ": "",
    "\\le": "<=",
    "\\ge": ">=",
    "\\dfrac": "\\frac",
    "\\tfrac": "\\frac",
}


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the block after ``seconds`` (SIGALRM: main thread only; elsewhere no limit)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"symbolic comparison took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def is_digit(s: Any) -> tuple[bool, float | None]:
    """``(True, value)`` when ``s`` reads as a number (thousands separators ``,`` / ``{,}`` allowed)."""
    try:
        return True, float(str(s).replace("{,}", "").replace(",", ""))
    except ValueError:
        return False, None


def _braced(text: str, start: int) -> tuple[str, int]:
    """The content of the brace group opening at ``text[start]`` and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    raise ValueError(f"unbalanced braces in {text!r}")


def _argument(text: str, start: int) -> tuple[str, int]:
    """One LaTeX argument at ``text[start]``: a brace group or a single character."""
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text):
        raise ValueError(f"missing argument in {text!r}")
    if text[start] == "{":
        return _braced(text, start)
    return text[start], start + 1


def latex_to_text(expr: str) -> str:
    """LaTeX math as sympy-parsable text: ``\\frac{a}{b}`` -> ``(a)/(b)``, ``\\sqrt[n]{x}`` -> ``(x)**(1/(n))``,
    ``^`` -> ``**``, ``\\cdot`` -> ``*``, ``\\pi`` -> ``pi``, braces -> parentheses."""
    text = expr
    for command, replacement in _SIMPLE_COMMANDS.items():
        text = text.replace(command, replacement)
    text = re.sub(r"\\(?:text|mathrm|mathbf|textbf)\{([^{}]*)\}", r"\1", text)
    out, i = [], 0
    while i < len(text):
        if text.startswith("\\frac", i):
            numerator, i = _argument(text, i + len("\\frac"))
            denominator, i = _argument(text, i)
            if numerator.strip().isdigit() and denominator.strip().isdigit():
                out.append(f"{numerator.strip()}/{denominator.strip()}")  # keeps "2/4" recognisable as a fraction
            else:
                out.append(f"({latex_to_text(numerator)})/({latex_to_text(denominator)})")
        elif text.startswith("\\sqrt", i):
            i += len("\\sqrt")
            root = "2"
            if i < len(text) and text[i] == "[":
                end = text.index("]", i)
                root, i = text[i + 1 : end], end + 1
            body, i = _argument(text, i)
            out.append(f"({latex_to_text(body)})**(1/({latex_to_text(root)}))")
        elif text[i] == "{":
            body, i = _braced(text, i)
            out.append(f"({latex_to_text(body)})")
        elif text[i] == "\\":
            name = re.match(r"\\([a-zA-Z]+)", text[i:])
            if name is None:
                raise ValueError(f"cannot read LaTeX at {text[i : i + 10]!r}")
            out.append(name.group(1))  # \sin -> sin, \ln -> ln, ...
            i += len(name.group(0))
        else:
            out.append(text[i])
            i += 1
    return "".join(out).replace("^", "**")


def _sympy(expr: str) -> Any:
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    transformations = (*standard_transformations, implicit_multiplication_application, convert_xor)
    return parse_expr(latex_to_text(expr), transformations=transformations, evaluate=True)


def symbolic_equal(a: str, b: str, tolerance: float = 1e-4, timeout: float = 10.0) -> bool:
    """Whether sympy finds ``a - b`` to be 0 (exactly, or numerically within ``tolerance``)."""
    import sympy

    try:
        with _time_limit(timeout):
            left, right = _sympy(a), _sympy(b)
            if sympy.simplify(left - right) == 0:
                return True
            values = complex(sympy.N(left)), complex(sympy.N(right))
            return abs(values[0] - values[1]) <= tolerance * max(1.0, abs(values[1]))
    except Exception:  # noqa: BLE001 - unparsable or non-numeric answers are simply "not equal"
        return False


def _strip_value(answer: Any, pi: float) -> Any:
    """``$5`` -> ``5``, ``50%`` -> ``50``, ``101_2`` -> 101 (base marker dropped), ``2\\pi`` -> its value."""
    if not isinstance(answer, str):
        return answer
    text = answer.strip()
    if re.fullmatch(r"\\?\$\d+(\.\d+)?", text):
        return text.lstrip("\\$")
    if re.fullmatch(r"\d+(\.\d+)?\\?%", text):
        return text.replace("\\%", "").replace("%", "")
    if "_" in text and re.fullmatch(r"\d+_\{?\d+\}?", text):
        return text.split("_")[0]
    if "\\pi" in text:
        with contextlib.suppress(Exception):
            numeric = re.sub(r"(\d)\s*\\pi", rf"\1*{pi}", text).replace("\\pi", str(pi))
            if re.fullmatch(r"[\d.+\-*/() ]+", numeric):
                return str(eval(numeric, {"__builtins__": {}}))  # noqa: S307 - digits and operators only
    return text


def _pieces(text: str) -> tuple[str, list[str], str] | None:
    """``(open, elements, close)`` of a tuple/interval ``(a, b]``; None for anything else."""
    if len(text) >= 2 and text[0] in "([" and text[-1] in ")]" and "," in text:
        return text[0], [p.strip() for p in text[1:-1].split(",")], text[-1]
    return None


def math_equal(
    prediction: Any,
    reference: Any,
    include_percentage: bool = True,
    tolerance: float = 1e-4,
    timeout: float | bool = 10.0,
    pi: float = math.pi,
) -> bool:
    """Whether ``prediction`` equals ``reference`` as text, number, tuple/interval or symbolic expression.
    ``timeout``: seconds for the symbolic step (``True``: 10 s, ``False``: no limit)."""
    seconds = 10.0 if timeout is True else (0.0 if timeout is False else float(timeout))
    prediction, reference = _strip_value(prediction, pi), _strip_value(reference, pi)
    if isinstance(prediction, str):
        prediction = prediction[:_MAX_CHARS]
    pred_text, ref_text = str(prediction).strip(), str(reference).strip()
    if pred_text.lower() == ref_text.lower() or pred_text.replace(" ", "") == ref_text.replace(" ", ""):
        return True
    pred_num, ref_num = is_digit(prediction), is_digit(reference)
    if pred_num[0] and ref_num[0]:
        candidates = [ref_num[1] / 100, ref_num[1], ref_num[1] * 100] if include_percentage else [ref_num[1]]
        return any(math.isclose(c, pred_num[1], rel_tol=tolerance) for c in candidates)
    if not pred_text:
        return False
    pred_parts, ref_parts = _pieces(pred_text), _pieces(ref_text)
    if pred_parts and ref_parts:
        same_brackets = pred_parts[0] == ref_parts[0] and pred_parts[2] == ref_parts[2]
        return (
            same_brackets
            and len(pred_parts[1]) == len(ref_parts[1])
            and all(
                math_equal(p, r, include_percentage, tolerance, timeout, pi)
                for p, r in zip(pred_parts[1], ref_parts[1], strict=True)
            )
        )
    if "=" in pred_text and "=" not in ref_text and pred_text.count("=") == 1:
        pred_text = pred_text.split("=")[1].strip()  # "x = 3" against "3"
    return symbolic_equal(pred_text, ref_text, tolerance, seconds)
