"""Client of a SandboxFusion service (https://github.com/bytedance/SandboxFusion ``/run_code``) and the per-case
checks that use it. Needs no extra package (HTTP via the standard library)."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from verl.utils.reward_score.code_tests import Execution, extract_code, run_test_cases

__all__ = ["SUPPORTED_LANGUAGES", "call_sandbox_api", "check_correctness", "remote_executor"]

logger = logging.getLogger(__name__)

SUPPORTED_LANGUAGES = (
    "python",
    "cpp",
    "nodejs",
    "go",
    "go_test",
    "java",
    "php",
    "csharp",
    "bash",
    "typescript",
    "sql",
    "rust",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "pytest",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
)
MAX_RETRIES = 3
_RETRY_DELAY_S = 1.0
_API_SLACK_S = 10
DEFAULT_TIMEOUT = 10


def call_sandbox_api(
    sandbox_fusion_url: str,
    code: str,
    stdin: str | None,
    compile_timeout: int,
    run_timeout: int,
    memory_limit_mb: int,
    language: str = "python",
) -> tuple[dict[str, Any] | None, str | None]:
    """POST one program to ``sandbox_fusion_url``; ``(response_json, None)`` or ``(None, error)``. Gateway
    timeouts (504) are retried with a growing delay."""
    if language not in SUPPORTED_LANGUAGES:
        return None, f"unsupported language {language!r} for SandboxFusion"
    payload = json.dumps(
        {
            "compile_timeout": compile_timeout,
            "run_timeout": run_timeout,
            "code": code,
            "stdin": stdin,
            "memory_limit_MB": memory_limit_mb,
            "language": language,
            "files": {},
            "fetch_files": [],
        }
    ).encode()
    request = urllib.request.Request(
        sandbox_fusion_url,
        data=payload,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    error = None
    for attempt in range(MAX_RETRIES):
        try:
            with urllib.request.urlopen(request, timeout=compile_timeout + run_timeout + _API_SLACK_S) as resp:
                return json.loads(resp.read().decode()), None
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code} from {sandbox_fusion_url}"
            if exc.code != 504:
                break
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            error = f"request to {sandbox_fusion_url} failed: {exc}"
            break
        except json.JSONDecodeError as exc:
            error = f"{sandbox_fusion_url} did not answer JSON: {exc}"
            break
        time.sleep(_RETRY_DELAY_S * (attempt + 1))
    logger.warning("SandboxFusion call failed: %s", error)
    return None, error


def _execution(response: dict[str, Any] | None, error: str | None) -> Execution:
    if response is None:
        return Execution("api_error", detail={"error": error})
    compiled = response.get("compile_result") or {}
    ran = response.get("run_result") or {}
    detail = {
        "api_status": response.get("status"),
        "compile_status": compiled.get("status"),
        "run_status": ran.get("status"),
        "exit_code": ran.get("return_code"),
        "duration": ran.get("execution_time"),
    }
    stdout, stderr = ran.get("stdout") or "", ran.get("stderr") or ""
    status = response.get("status")
    if status == "Success" and ran.get("status") == "Finished":
        return Execution("ok", stdout, stderr, detail)
    if status == "Failed":
        if compiled and (
            compiled.get("status") in ("Error", "TimeLimitExceeded")
            or (compiled.get("status") == "Finished" and compiled.get("return_code") != 0)
        ):
            return Execution("compile_error", stdout, compiled.get("stderr") or stderr, detail)
        if ran.get("status") == "TimeLimitExceeded":
            return Execution("timeout", stdout, stderr, detail)
        if ran.get("status") == "Error" or (ran.get("status") == "Finished" and ran.get("return_code") != 0):
            return Execution("runtime_error", stdout, stderr, detail)
    return Execution(
        "sandbox_error" if status == "SandboxError" else f"unknown_status_{status}", stdout, stderr, detail
    )


def remote_executor(
    sandbox_fusion_url: str,
    memory_limit_mb: int = 1024,
    language: str = "python",
    concurrent_semaphore: threading.Semaphore | None = None,
):
    """An executor (see :mod:`verl.utils.reward_score.code_tests`) running programs on a SandboxFusion service;
    ``concurrent_semaphore`` bounds the requests in flight across threads."""

    def run(code: str, stdin: str | None, timeout: float) -> Execution:
        args = (sandbox_fusion_url, code, stdin, int(timeout), int(timeout), memory_limit_mb, language)
        if concurrent_semaphore is None:
            return _execution(*call_sandbox_api(*args))
        with concurrent_semaphore:
            return _execution(*call_sandbox_api(*args))

    return run


def check_correctness(
    sandbox_fusion_url: str,
    in_outs: Any,
    generation: str,
    timeout: int = DEFAULT_TIMEOUT,
    memory_limit_mb: int = 1024,
    language: str = "python",
    concurrent_semaphore: threading.Semaphore | None = None,
) -> tuple[list[Any], list[dict]]:
    """Per-case result codes and metadata of ``generation`` on ``in_outs`` (see ``code_tests``)."""
    executor = remote_executor(sandbox_fusion_url, memory_limit_mb, language, concurrent_semaphore)
    code = generation if extract_code(generation) is None else extract_code(generation)
    return run_test_cases(executor, code, in_outs, timeout)
