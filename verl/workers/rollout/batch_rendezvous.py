"""Merge the batch calls that one trainer batch sends to one engine, so that they decode as one batch.

The agent-loop manager splits a batch over several agent-loop workers, and each sends its share to a hybrid
engine in one call. Calls that arrive a few milliseconds apart become two admission waves: two prefills, and rows
out of phase until the last token (measured on the tiny model, 256 single-turn samples: 70 ms in one wave, 80 ms
in two). So the manager tags the calls of one batch with a :class:`BatchGroup` (an id and how many calls it sends),
and the engine's side holds the first call of a group until the others have arrived, or a short window has passed,
then serves them together and hands each caller its own results.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BatchGroup", "BatchRendezvous"]


@dataclass(frozen=True)
class BatchGroup:
    """The calls one trainer batch makes to each engine: ``calls`` of them share ``id``."""

    id: str
    calls: int


@dataclass
class _Gathering:
    parts: list[list[Any]]
    followers: list[asyncio.Future] = field(default_factory=list)
    full: asyncio.Event = field(default_factory=asyncio.Event)


class BatchRendezvous:
    """Serve the calls of one :class:`BatchGroup` as one batch. Runs on one event loop (the engine owner's).

    Args:
        window_s: how long the first call of a group waits for the others; the calls of one batch leave the
            manager together, so they normally arrive within milliseconds, and a call that never comes (a worker
            that routed nothing to this engine) costs at most this much.
        remember: how many finished group ids are kept, so late calls of a group (e.g. later turns of multi-turn
            samples) are served at once instead of waiting for partners that will not come.
    """

    def __init__(self, window_s: float = 0.05, remember: int = 1024) -> None:
        self.window_s = float(window_s)
        self._open: dict[str, _Gathering] = {}
        self._closed: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember = int(remember)
        self.merged_calls: collections.deque[int] = collections.deque(maxlen=1024)  # calls per served batch

    async def serve(
        self, group: BatchGroup | None, requests: list[Any], serve: Callable[[list[Any]], Awaitable[list[Any]]]
    ) -> list[Any]:
        """``serve(requests)``'s results, with ``requests`` merged into the other calls of ``group`` first."""
        if group is None or group.calls <= 1 or group.id in self._closed:
            self.merged_calls.append(1)
            return await serve(requests)
        gathering = self._open.get(group.id)
        if gathering is not None:  # a later call of an open group: the first one serves it
            result: asyncio.Future = asyncio.get_running_loop().create_future()
            gathering.parts.append(requests)
            gathering.followers.append(result)
            if len(gathering.parts) >= group.calls:
                gathering.full.set()
            return await result
        gathering = _Gathering(parts=[requests])
        self._open[group.id] = gathering
        try:
            try:
                await asyncio.wait_for(gathering.full.wait(), timeout=self.window_s)
            except asyncio.TimeoutError:
                pass  # serve who is here; the rest is served on arrival
            finally:
                del self._open[group.id]
                self._closed[group.id] = None
                while len(self._closed) > self._remember:
                    self._closed.popitem(last=False)
            self.merged_calls.append(len(gathering.parts))
            results = await serve([request for part in gathering.parts for request in part])
        except BaseException as exc:  # the followers' calls fail with the same cause instead of waiting forever
            for follower in gathering.followers:
                if not follower.done():
                    follower.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            raise
        offset = len(requests)
        for part, follower in zip(gathering.parts[1:], gathering.followers, strict=True):
            if not follower.done():
                follower.set_result(results[offset : offset + len(part)])
            offset += len(part)
        return results[: len(requests)]
