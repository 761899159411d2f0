"""Code reward on a remote SandboxFusion service (verl's ``sandbox_fusion`` scorer, used when a
``sandbox_fusion.url`` is configured).

``compute_score(sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, completion, test_cases,
continuous=False, timeout=10)`` returns ``(pass_rate, metadata)``: the pass rate over all cases, or over the first
10 with ``continuous``. The completion must contain a fenced code block. Test cases may also be assert-style
(``{"assert_case": [...]}``: each entry a program appended to the completion that must run cleanly).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from verl.utils.reward_score.code_tests import PASS, extract_code, parse_test_cases, run_test_cases
from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api, check_correctness, remote_executor

__all__ = ["call_sandbox_api", "check_correctness", "compute_score"]

logger = logging.getLogger(__name__)

CONTINUOUS_CASES = 10


def _assert_cases(test_cases: Any) -> dict[str, Any] | None:
    import json

    if isinstance(test_cases, str):
        try:
            test_cases = json.loads(test_cases)
        except json.JSONDecodeError:
            return None
    if isinstance(test_cases, dict) and isinstance(test_cases.get("assert_case"), list):
        return test_cases
    return None


def compute_score(
    sandbox_fusion_url: str,
    concurrent_semaphore: threading.Semaphore | None,
    memory_limit_mb: int | None,
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    timeout: int = 10,
) -> tuple[float, list[dict[str, Any]]]:
    """Pass rate of ``completion``'s program on ``test_cases`` run by the service at ``sandbox_fusion_url``."""
    code = extract_code(completion)
    if code is None:
        return 0.0, [{"error": "the completion has no fenced code block"}]
    executor = remote_executor(
        sandbox_fusion_url, int(memory_limit_mb or 1024), concurrent_semaphore=concurrent_semaphore
    )
    asserts = _assert_cases(test_cases)
    try:
        if asserts is not None:
            results, metadata = [], []
            for index, check in enumerate(asserts["assert_case"]):  # one clean run per assertion program
                r, m = run_test_cases(executor, f"{code}\n{check}", {"inputs": [""], "outputs": [None]}, timeout)
                results += r
                metadata += [{**m[0], "case_index": index}]
        else:
            parse_test_cases(test_cases)
            results, metadata = run_test_cases(executor, code, test_cases, timeout)
    except ValueError as exc:
        logger.warning("sandbox_fusion: %s", exc)
        return 0.0, [{"error": str(exc)}]
    considered = results[:CONTINUOUS_CASES] if continuous else results
    if not considered:
        return 0.0, metadata
    return float(sum(r is PASS for r in considered) / len(considered)), metadata
