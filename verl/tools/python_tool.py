"""PythonTool: run model-written Python in the sandbox (:mod:`verl.tools.sandbox`) and return its output.

Config keys: every :class:`~verl.tools.sandbox.SandboxLimits` field (wall_timeout_s, cpu_time_s, memory_mb,
max_file_mb, max_open_files, max_processes, max_output_bytes, network, allow_subprocesses, allowed_packages,
allow_missing_layers, ...), plus ``max_concurrency`` (sandboxes running at once in this process, default 4) and
``timeout_s`` (the agent loop's limit on one call; default: the wall timeout plus 5 s, so the sandbox reports its
own timeout first).

The tool checks at construction (start-up) that this machine gives the sandbox every required layer and raises
:class:`~verl.tools.sandbox.SandboxUnavailableError` naming the missing ones otherwise; ``allow_missing_layers``
(``true`` or a list of layer names) is the opt-in to run with the weaker sandbox. See docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.sandbox import SandboxLimits, check_layers, run_python
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["PythonTool"]


class PythonTool(BaseTool):
    """``code_interpreter(code: str)``: the program's stdout (and the error, when it fails) as text."""

    default_schema = {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run a Python program and read what it prints. No network, no subprocesses.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "the program"}},
                "required": ["code"],
            },
        },
    }

    def __init__(
        self, config: dict[str, Any] | None = None, tool_schema: OpenAIFunctionToolSchema | dict[str, Any] | None = None
    ) -> None:
        config = dict(config or {})
        self.limits = SandboxLimits.from_config(config, where=f"tool {type(self).__qualname__} config")
        config.setdefault("timeout_s", float(self.limits.wall_timeout_s) + 5.0)
        super().__init__(config, tool_schema)
        concurrency = config.get("max_concurrency", 4)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(
                f"tool {type(self).__qualname__} config.max_concurrency: must be an int >= 1, got {concurrency!r}"
            )
        self.max_concurrency = concurrency
        self.layers = check_layers(self.limits, where=f"tool {self.name!r} ({type(self).__qualname__})")
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    def _semaphore(self) -> asyncio.Semaphore:
        # one per event loop: a semaphore is bound to the loop that first waits on it
        loop = asyncio.get_running_loop()
        key = id(loop)
        if key not in self._semaphores:
            self._semaphores[key] = asyncio.Semaphore(self.max_concurrency)
        return self._semaphores[key]

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResponse(text="Error: 'code' must be a non-empty string"), 0.0, {"sandbox_status": "error"}
        async with self._semaphore():
            result = await run_python(code, self.limits)
        metrics = {
            "sandbox_status": result.status,
            "sandbox_duration_s": result.duration_s,
            "sandbox_error_type": result.error_type,
            "sandbox_timeout_kind": result.timeout_kind,
        }
        return ToolResponse(text=result.to_text()), 0.0, metrics
