"""Many token-level requests per Ray call, on both sides of the call.

A Ray call costs about a millisecond of CPU on each side, as much as decoding a short answer on a small model, and
an agent loop makes one ``generate`` call per sample. So a caller holding a remote engine (one rank of a hybrid
worker group, or a standalone replica actor) coalesces: the requests made in one turn of its event loop travel
together in one call, packed into one ``bytes`` (:mod:`verl.workers.rollout.batch_wire`), and reach the engine's
admission queue together, where they decode as one batch. Each caller still gets its own result or its own error.

- :class:`RequestCoalescer` and :func:`call_batch_method`: the caller's side.
- :func:`serve_request_batch`: the engine's side; it merges the calls of one trainer batch first
  (:mod:`verl.workers.rollout.batch_rendezvous`) and answers each request with its output or the exception it raised.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from verl.utils.async_utils import await_ray
from verl.workers.rollout.batch_rendezvous import BatchGroup, BatchRendezvous
from verl.workers.rollout.batch_wire import pack_batch, unpack_batch

__all__ = [
    "CURRENT_BATCH_GROUP",
    "Request",
    "RequestCoalescer",
    "call_batch_method",
    "gather_each",
    "serve_request_batch",
]

# The batch group of the trainer batch the current agent-loop task belongs to (set by AgentLoopWorker): batch calls
# carry it so the engine merges the calls of one batch (verl.workers.rollout.batch_rendezvous).
CURRENT_BATCH_GROUP: contextvars.ContextVar[Any] = contextvars.ContextVar("verl_rollout_batch_group", default=None)

Request = tuple[list[int], dict[str, Any], str]  # prompt_ids, sampling_params, request_id
SendBatch = Callable[[list[Request]], Awaitable[list[Any]]]


class RequestCoalescer:
    """Collects the requests made in one turn of an event loop and sends them with one ``send`` call.

    ``send(requests)`` returns one entry per request, its output or the exception it raised; when ``send`` itself
    raises (a dead actor, a timeout), every request of that call fails with the same error. Not picklable state:
    owners drop it when they are pickled and make a new one.
    """

    def __init__(self) -> None:
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[Request, asyncio.Future]]] = {}
        self._sends: set[asyncio.Task] = set()
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=1024)  # requests per recent call

    async def submit(self, request: Request, send: SendBatch) -> Any:
        """``request``'s own result, sent together with the other requests of this turn of the running loop."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future = loop.create_future()
        pending = self._pending.setdefault(loop, [])
        pending.append((request, result))
        if len(pending) == 1:  # the first request of this turn schedules the send
            task = loop.create_task(self._flush(loop, send))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        return await result

    async def _flush(self, loop: asyncio.AbstractEventLoop, send: SendBatch) -> None:
        await asyncio.sleep(0)  # let the other requests of this turn join
        pending = self._pending.pop(loop, [])
        self.batch_sizes.append(len(pending))
        try:
            outputs = await send([request for request, _ in pending])
        except BaseException as exc:  # the whole call failed: every caller sees it
            for _, result in pending:
                if result.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    result.cancel()
                else:
                    result.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, result), output in zip(pending, outputs, strict=True):
            if result.done():  # the caller gave up (timeout, cancel)
                continue
            if isinstance(output, BaseException):
                result.set_exception(output)
            else:
                result.set_result(output)


async def call_batch_method(method: Any, requests: list[Request], timeout_s: float, where: str) -> list[Any]:
    """One Ray call of the actor ``method`` (which takes packed requests and the batch group, and returns packed
    results) for ``requests``; a timeout or a dead actor raises, naming ``where`` and the first request."""
    ref = method.remote(pack_batch(requests), CURRENT_BATCH_GROUP.get())
    what = f"{where}: {len(requests)} requests ({requests[0][2]}, ...)"
    return unpack_batch(await await_ray(ref, timeout_s, what))


def gather_each(generate: Callable[[list[int], dict[str, Any], str], Awaitable[Any]]) -> SendBatch:
    """A batch server that runs ``generate`` for every request concurrently, keeping each one's exception."""

    async def serve(batch: list[Request]) -> list[Any]:
        calls = [generate(list(ids), dict(params), rid) for ids, params, rid in batch]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    return serve


async def serve_request_batch(
    requests: list[Request] | bytes, batch_group: BatchGroup | None, rendezvous: BatchRendezvous, serve: SendBatch
) -> list[Any] | bytes:
    """``serve``'s per-request outputs (or exceptions) for ``requests`` merged with the other calls of
    ``batch_group``; requests packed with :func:`~verl.workers.rollout.batch_wire.pack_batch` get packed results."""
    packed = isinstance(requests, bytes)
    outputs = await rendezvous.serve(batch_group, unpack_batch(requests), serve)
    return pack_batch(outputs) if packed else outputs
