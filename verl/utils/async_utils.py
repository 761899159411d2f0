"""Small asyncio helpers that keep the project's async code rules.

- Every wait has a timeout, and a timeout names what was waited on (:func:`wait_named`, :func:`await_ray`).
- Background tasks go through :func:`spawn_logged`: the exception is logged with its traceback, recorded on the
  owner, and never raised from a done-callback nor silently dropped (asyncio only keeps weak references to tasks,
  so the helper also keeps them alive until they finish).
- :func:`run_blocking` is the one way a blocking public method runs its async twin; it refuses to nest inside a
  running event loop instead of deadlocking it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

__all__ = ["FAILURE_ATTR", "await_ray", "run_blocking", "spawn_logged", "wait_named"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Attribute that spawn_logged sets on the owner to the first exception one of its background tasks raised.
FAILURE_ATTR = "background_error"

_LIVE_TASKS: set[asyncio.Task] = set()


def spawn_logged(coro: Coroutine[Any, Any, T], owner: Any = None, name: str = "background task") -> asyncio.Task[T]:
    """Start ``coro`` as a task on the running loop; if it fails, log it and mark ``owner`` failed.

    The owner gets ``owner.background_error = exc`` (the first failure only) so that its next public call can raise
    it; a cancelled task is not a failure. Returns the task, which callers may still await or cancel.
    """
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _LIVE_TASKS.add(task)

    def _done(done: asyncio.Task) -> None:
        _LIVE_TASKS.discard(done)
        if done.cancelled():
            return
        exc = done.exception()
        if exc is None:
            return
        owner_name = type(owner).__name__ if owner is not None else "no owner"
        logger.error("%s (%s) failed", name, owner_name, exc_info=(type(exc), exc, exc.__traceback__))
        if owner is not None and getattr(owner, FAILURE_ATTR, None) is None:
            try:
                setattr(owner, FAILURE_ATTR, exc)
            except AttributeError:  # frozen or slotted owner: the log line is all we can do
                pass

    task.add_done_callback(_done)
    return task


async def wait_named(awaitable: Awaitable[T], timeout_s: float | None, what: str) -> T:
    """``await awaitable`` for at most ``timeout_s`` seconds (``None``: no limit); a timeout names ``what``."""
    if timeout_s is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout=timeout_s)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what} did not finish within {timeout_s:g}s") from None


async def await_ray(ref: Any, timeout_s: float | None, what: str) -> Any:
    """Await one Ray ``ObjectRef`` from any event loop, with a timeout naming ``what``."""
    return await wait_named(asyncio.wrap_future(ref.future()), timeout_s, what)


def run_blocking(coro: Coroutine[Any, Any, T], what: str) -> T:
    """Run ``coro`` to completion from synchronous code (the blocking twin of an async method).

    Inside a running event loop this would deadlock or need frame tricks, so it raises instead and tells the
    caller to await the async variant.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(f"{what} is blocking and was called from a running event loop; await its async variant")
