"""Running a model's program against test cases: the shared core of the ``prime_code`` and ``sandbox_fusion``
scorers.

Test cases come as ``{"inputs": [...], "outputs": [...]}`` (APPS / CodeContests / TACO format), optionally with
``"fn_name"``. Without ``fn_name`` each input is fed to the program's stdin and its stdout must match the
output (trailing whitespace ignored, numbers compared with a small tolerance). With ``fn_name`` the program must
define that function (or a ``Solution`` class with that method); each input is the call's arguments (a list, or a
string holding one JSON value per line) and the printed JSON result must equal the output.

Each case is one run of an *executor* (``run(code, stdin, timeout) -> Execution``): the local sandbox
(:mod:`verl.tools.sandbox`) or a remote SandboxFusion service. Result codes per case follow verl: ``True`` pass,
``False`` wrong answer, ``-1`` sandbox/API error, ``-2`` runtime error, ``-3`` timeout, ``-4`` compile error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Execution",
    "extract_code",
    "local_executor",
    "outputs_match",
    "parse_test_cases",
    "program_for_case",
    "run_test_cases",
]

PASS, WRONG, ERROR, RUNTIME_ERROR, TIMEOUT, COMPILE_ERROR = True, False, -1, -2, -3, -4
_FLOAT_TOLERANCE = 1e-6

# Call-based harness: the user's program, then a driver that calls the named function with the case's arguments
# (read from stdin) and prints the result as JSON.
_DRIVER = """

def __verl_call():
    import json as _json
    import sys as _sys
    _args = [_json.loads(line) for line in _sys.stdin.read().splitlines() if line.strip()]
    _name = {fn_name!r}
    _target = globals().get(_name)
    if _target is None and "Solution" in globals():
        _target = getattr(globals()["Solution"](), _name)
    if _target is None:
        raise NameError(f"the program defines no function or Solution method named {{_name!r}}")
    _result = _target(*_args)
    if isinstance(_result, tuple):
        _result = list(_result)
    print(_json.dumps(_result))


__verl_call()
"""


@dataclass
class Execution:
    """One run: ``status`` ``ok`` | ``runtime_error`` | ``timeout`` | ``compile_error`` | ``error`` (the executor
    itself failed), the program's output and what went wrong."""

    status: str
    stdout: str = ""
    stderr: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


Executor = Callable[[str, str | None, float], Execution]


def extract_code(completion: str) -> str | None:
    """The program of a completion: the last fenced ```` ```python ```` block, else the first fenced block (minus
    a language tag line); None when there is no fenced block."""
    if "```python" in completion:
        return completion.split("```python")[-1].split("```")[0]
    if "```" in completion:
        parts = completion.split("```")
        if len(parts) >= 2:
            body = parts[1]
            first, _, rest = body.partition("\n")
            return rest if first.strip().isalpha() else body
    return None


def parse_test_cases(test_cases: Any) -> dict[str, Any]:
    """The test cases as a dict with equal-length ``inputs`` and ``outputs``; raises ValueError saying what is
    wrong."""
    if isinstance(test_cases, str | bytes):
        try:
            test_cases = json.loads(test_cases)
        except json.JSONDecodeError as exc:
            raise ValueError(f"test cases are not valid JSON: {exc}") from exc
    if not isinstance(test_cases, dict) or "inputs" not in test_cases or "outputs" not in test_cases:
        raise ValueError("test cases must be a mapping with 'inputs' and 'outputs'")
    inputs, outputs = list(test_cases["inputs"]), list(test_cases["outputs"])
    if len(inputs) != len(outputs):
        raise ValueError(f"test cases have {len(inputs)} inputs but {len(outputs)} outputs")
    return {**test_cases, "inputs": inputs, "outputs": outputs}


def program_for_case(code: str, case_input: Any, fn_name: str | None) -> tuple[str, str | None]:
    """``(program, stdin)`` for one case."""
    if fn_name:  # arguments one JSON value per line: a list input is the argument list
        if isinstance(case_input, str):
            stdin = case_input
        elif isinstance(case_input, list | tuple):
            stdin = "\n".join(json.dumps(a) for a in case_input)
        else:
            stdin = json.dumps(case_input)
        return code + _DRIVER.format(fn_name=fn_name), stdin
    if isinstance(case_input, list):
        case_input = "\n".join(str(x) for x in case_input)
    return code, None if case_input is None else str(case_input)


def _tokens_match(actual: str, expected: str) -> bool:
    got, want = actual.split(), expected.split()
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        if a == b:
            continue
        try:
            if not math.isclose(float(a), float(b), rel_tol=_FLOAT_TOLERANCE, abs_tol=_FLOAT_TOLERANCE):
                return False
        except ValueError:
            return False
    return True


def outputs_match(actual: str, expected: Any, call_based: bool) -> bool:
    """Whether a run's stdout is the expected output (see the module docstring)."""
    if expected is None:
        return True  # assert-style cases: running cleanly is the test
    if call_based:
        try:
            value = json.loads(actual.strip())
        except ValueError:
            return False
        if isinstance(expected, str):
            try:
                expected = json.loads(expected)
            except ValueError:
                pass
        wanted = [expected]
        if isinstance(expected, list) and len(expected) == 1:
            wanted.append(expected[0])  # APPS wraps a return value in a one-element list
        return any(value == w or _tokens_match(json.dumps(value), json.dumps(w)) for w in wanted)
    if isinstance(expected, list):
        expected = "\n".join(str(x) for x in expected)
    got = "\n".join(line.rstrip() for line in str(actual).strip().splitlines())
    want = "\n".join(line.rstrip() for line in str(expected).strip().splitlines())
    return got == want or _tokens_match(got, want)


def _verdict(run: Execution, expected: Any, call_based: bool) -> tuple[Any, str]:
    if run.status == "ok":
        return (PASS, "success") if outputs_match(run.stdout, expected, call_based) else (WRONG, "wrong_answer")
    return {
        "timeout": (TIMEOUT, "timeout"),
        "runtime_error": (RUNTIME_ERROR, "runtime_error"),
        "compile_error": (COMPILE_ERROR, "compile_error"),
    }.get(run.status, (ERROR, run.status))


def run_test_cases(
    executor: Executor,
    code: str,
    test_cases: Any,
    timeout: float = 10.0,
    max_cases: int | None = None,
    stop_at_first_failure: bool = False,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Run ``code`` on the (first ``max_cases``) test cases; returns the result codes and per-case metadata."""
    cases = parse_test_cases(test_cases)
    fn_name = cases.get("fn_name")
    pairs = list(zip(cases["inputs"], cases["outputs"], strict=True))[:max_cases]
    results: list[Any] = []
    metadata: list[dict[str, Any]] = []
    for index, (case_input, expected) in enumerate(pairs):
        program, stdin = program_for_case(code, case_input, fn_name)
        run = executor(program, stdin, timeout)
        verdict, status = _verdict(run, expected, bool(fn_name))
        results.append(verdict)
        metadata.append(
            {
                "case_index": index,
                "status": status,
                "stdout": run.stdout[-2000:],
                "stderr": run.stderr[-2000:],
                "input": str(case_input)[:2000],
                "expected_output": str(expected)[:2000],
                **run.detail,
            }
        )
        if stop_at_first_failure and verdict is not PASS:
            break
    return results, metadata


def local_executor(memory_mb: int = 1024) -> Executor:
    """An executor running each program in this machine's sandbox (:mod:`verl.tools.sandbox`)."""

    def run(code: str, stdin: str | None, timeout: float) -> Execution:
        from verl.tools.sandbox import SandboxLimits
        from verl.utils.reward_score.sandbox_runner import run_sandboxed

        limits = SandboxLimits(
            wall_timeout_s=float(timeout), cpu_time_s=max(1, math.ceil(timeout)), memory_mb=int(memory_mb)
        )
        result = run_sandboxed(code, limits, stdin)
        if result.status == "ok":
            return Execution("ok", result.stdout, result.stderr)
        if result.status == "timeout":
            return Execution("timeout", result.stdout, result.stderr, {"timeout_kind": result.timeout_kind})
        if result.error_type == "SandboxSetupError":  # the sandbox, not the program, failed
            return Execution("sandbox_error", result.stdout, result.stderr, {"error_type": result.error_type})
        status = (
            "compile_error" if result.error_type in ("SyntaxError", "IndentationError", "TabError") else "runtime_error"
        )
        return Execution(status, result.stdout, result.stderr, {"error_type": result.error_type})

    return run
