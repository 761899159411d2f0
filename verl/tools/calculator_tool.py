"""CalculatorTool: exact arithmetic for the model, evaluated from the syntax tree (never ``eval``).

Accepted: int and float literals, ``+ - * / // % **``, parentheses, unary ``+``/``-``. Bounded so that no input
can hang or exhaust the process: expression length, exponent size and result size (checked *before* a power is
computed, from its number of digits).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

__all__ = ["CalculatorError", "CalculatorTool", "format_number", "safe_eval"]

MAX_EXPRESSION_CHARS = 256
MAX_EXPONENT = 128
MAX_RESULT_DIGITS = 100

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message is meant for the model."""


def _digits(value: int | float) -> float:
    return math.log10(abs(value)) + 1 if value else 1.0


def _check_size(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    if _digits(value) > MAX_RESULT_DIGITS + 1:
        raise CalculatorError(f"result has more than {MAX_RESULT_DIGITS} digits")
    return value


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > MAX_RESULT_DIGITS:
        raise CalculatorError(f"result has more than {MAX_RESULT_DIGITS} digits")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("result is not a real number (fractional power of a negative number)")
    return result


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"unsupported literal {node.value!r}: only numbers are allowed")
        return _check_size(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise CalculatorError("division by zero")
        return _check_size(_BINARY[type(node.op)](left, right))
    what = type(node.op).__name__ if isinstance(node, ast.BinOp | ast.UnaryOp) else type(node).__name__
    raise CalculatorError(f"unsupported syntax {what}: only numbers, + - * / // % **, parentheses and unary minus")


def safe_eval(expression: str) -> int | float:
    """Value of an arithmetic expression; CalculatorError (a ValueError) for anything else."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise CalculatorError("expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise CalculatorError(f"invalid expression: {err.msg}") from None
    try:
        return _eval(tree)
    except (OverflowError, RecursionError) as err:
        raise CalculatorError(f"expression too large to evaluate: {err}") from None


def format_number(value: int | float) -> str:
    """Integers as they are; floats with 12 significant digits, integral ones without a fraction ("6.0" -> "6")."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".12g")
    return str(value)


class CalculatorTool(BaseTool):
    """``calculator(expression: str)`` -> the value as text. A refused expression is answered with an ``Error:``
    line (the model's mistake, not the tool's), and counted in the call's metrics.

    ``calc_reward`` is 1.0 when the last value computed equals the ``ground_truth`` given at ``create`` (the
    synthetic ``tool_calc`` rows pass it), else 0.0.
    """

    default_schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. (23*17)+4"}},
                "required": ["expression"],
            },
        },
    }

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        state = self._instances.setdefault(instance_id, {"create_kwargs": {}})
        try:
            value = format_number(safe_eval(parameters.get("expression")))
        except CalculatorError as err:
            return ToolResponse(text=f"Error: {err}"), 0.0, {"calculator_error": 1}
        state["last_result"] = value
        return ToolResponse(text=value), 0.0, {"calculator_error": 0}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instances.get(instance_id) or {}
        truth = (state.get("create_kwargs") or {}).get("ground_truth")
        if truth is None or state.get("last_result") is None:
            return 0.0
        return 1.0 if str(state["last_result"]).strip() == str(truth).strip() else 0.0
