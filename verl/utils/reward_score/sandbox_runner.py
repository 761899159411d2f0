"""Call the local sandbox from reward code, which may run inside an event loop (async reward managers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

__all__ = ["run_sandboxed"]


def run_sandboxed(code: str, limits: Any, stdin: str | None) -> Any:
    """:func:`verl.tools.sandbox.run_python_sync`, moved to a worker thread when this thread runs an event loop
    (``asyncio.run`` refuses to nest)."""
    from verl.tools.sandbox import run_python_sync

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_python_sync(code, limits, stdin=stdin)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run_python_sync, code, limits, stdin=stdin).result()
