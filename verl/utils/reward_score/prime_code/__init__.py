"""PRIME's code reward (``data_source`` ``codecontests``/``apps``/``codeforces``/``taco`` without a SandboxFusion
URL): run the completion's program on the test cases in this machine's sandbox (:mod:`verl.tools.sandbox`: no
network, no subprocesses, CPU/memory limits).

``compute_score(completion, test_cases, continuous=False)`` returns ``(score, metadata)``: with ``continuous``
the pass rate over the first 10 cases (as verl, so huge test suites stay affordable), otherwise ``True`` when
every case passes (stopping at the first failure) and ``False`` otherwise. A completion without a fenced code
block is taken as code as it is.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.utils.reward_score.code_tests import PASS, extract_code, local_executor, run_test_cases

__all__ = ["CONTINUOUS_CASES", "compute_score"]

logger = logging.getLogger(__name__)

CONTINUOUS_CASES = 10


def compute_score(
    completion: str, test_cases: Any, continuous: bool = False, timeout: float = 10.0, memory_mb: int = 1024
) -> tuple[bool | float, list[dict[str, Any]]]:
    """Score ``completion`` on ``test_cases`` (JSON string or dict with ``inputs``/``outputs``[/``fn_name``])."""
    code = extract_code(completion)
    code = completion if code is None else code
    executor = local_executor(memory_mb)
    try:
        if continuous:
            results, metadata = run_test_cases(executor, code, test_cases, timeout, max_cases=CONTINUOUS_CASES)
            return (sum(r is PASS for r in results) / len(results) if results else 0.0), metadata
        results, metadata = run_test_cases(executor, code, test_cases, timeout, stop_at_first_failure=True)
        return bool(results) and all(r is PASS for r in results), metadata
    except ValueError as exc:  # malformed test cases: the sample cannot be scored, and says why
        logger.warning("prime_code: %s", exc)
        return (0.0 if continuous else False), [{"error": str(exc)}]
