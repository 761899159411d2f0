"""Which trajectory the current task works on: verl's ``rollout_trace_attr`` and ``get_trajectory_info``.

The worker runs each sample's loop inside ``rollout_trace_attr(step=..., sample_index=..., rollout_n=...)``; code
running in that task (the loop, its tools, the server manager) can ask :func:`current_trajectory` which sample it
serves, e.g. to label a log line. No tracing backend is attached here.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["current_trajectory", "get_trajectory_info", "rollout_trace_attr"]

_TRAJECTORY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("verl_trajectory", default=None)


@contextlib.contextmanager
def rollout_trace_attr(
    step: int = -1,
    sample_index: Any = None,
    rollout_n: int = 0,
    validate: bool = False,
    name: str = "rollout_trace",
    trace: bool = True,
    **attrs: Any,
) -> Iterator[dict[str, Any]]:
    """Mark the code inside as working on one trajectory (``trace=False``: not selected for tracing)."""
    info = {
        "step": step,
        "sample_index": sample_index,
        "rollout_n": rollout_n,
        "validate": validate,
        "name": name,
        "trace": trace,
        **attrs,
    }
    token = _TRAJECTORY.set(info)
    try:
        yield info
    finally:
        _TRAJECTORY.reset(token)


def current_trajectory() -> dict[str, Any] | None:
    """The attributes of the enclosing :func:`rollout_trace_attr`, or None outside one."""
    return _TRAJECTORY.get()


async def get_trajectory_info(step: int, index: Sequence[Any], validate: bool) -> list[dict[str, Any]]:
    """One ``{step, sample_index, rollout_n, validate}`` per row; ``rollout_n`` counts the consecutive rows of one
    sample index (the ``rollout.n`` copies of a prompt sit next to each other)."""
    info: list[dict[str, Any]] = []
    previous, repeat = object(), 0
    for value in index:
        repeat = repeat + 1 if value == previous else 0
        previous = value
        info.append({"step": step, "sample_index": value, "rollout_n": repeat, "validate": validate})
    return info
