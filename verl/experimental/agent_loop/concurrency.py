"""A bound on the trajectories one ``generate_sequences`` call runs at once, and the bound validation uses.

An agent-loop worker starts one task per row; a validation set sent as one batch (``data.val_batch_size=null``, the
default) would put every row's request in flight at once, 5,000 requests for a 5,000-row set. Validation passes a
bound (``rollout.val_kwargs.max_in_flight``, by default the samples of one training step) in the batch's
``meta_info``; the manager splits it over its workers and each worker holds its rows to its share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["MAX_IN_FLIGHT_KEY", "PEAK_IN_FLIGHT_KEY", "InFlightLimiter", "share_of", "validation_max_in_flight"]

MAX_IN_FLIGHT_KEY = "agent_loop_max_in_flight"  # meta_info: most trajectories in flight for this call
PEAK_IN_FLIGHT_KEY = "agent_loop_peak_in_flight"  # output meta_info: the most that were in flight at once

T = TypeVar("T")


def validation_max_in_flight(config: Any) -> int:
    """``rollout.val_kwargs.max_in_flight``, or ``data.train_batch_size x rollout.n`` when null."""
    configured = config.rollout.val_kwargs.get("max_in_flight")
    if configured is not None:
        if int(configured) < 1:
            raise ValueError(f"rollout.val_kwargs.max_in_flight must be >= 1 or null, got {configured}")
        return int(configured)
    return max(1, int(config.data.train_batch_size) * int(config.rollout.n))


def share_of(bound: int | None, workers: int) -> int | None:
    """One worker's share of ``bound`` (at least 1, so the total is at most ``max(bound, workers)``)."""
    if bound is None:
        return None
    return max(1, int(bound) // max(1, int(workers)))


class InFlightLimiter:
    """Runs coroutines with at most ``bound`` of them in progress (no bound when None); records the peak. Each is
    created only once it has a slot, so rows waiting for one hold nothing but their arguments."""

    def __init__(self, bound: int | None) -> None:
        if bound is not None and int(bound) < 1:
            raise ValueError(f"in-flight bound must be >= 1, got {bound}")
        self._slots = asyncio.Semaphore(int(bound)) if bound is not None else None
        self.in_flight = 0
        self.peak = 0

    async def run(self, start: Callable[[], Awaitable[T]]) -> T:
        if self._slots is None:
            return await self._counted(start)
        async with self._slots:
            return await self._counted(start)

    async def _counted(self, start: Callable[[], Awaitable[T]]) -> T:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await start()
        finally:
            self.in_flight -= 1
