"""MessageQueue: the bounded hand-over between the Rollouter and the FullyAsyncTrainer.

One Ray actor (``ray.remote(MessageQueue)``, async methods) so that producer and consumer never share a process.
Every ``put`` and ``get`` has a timeout naming what was waited on; ``close(reason)`` wakes every waiter with a
:class:`QueueClosedError` carrying the reason, which is how a dying side tells the other one why. Items are
opaque to the queue; statistics count puts, gets and what is buffered so tests can check that nothing is lost or
counted twice.

Payloads travel through the object store, not through the queue actor: the producer wraps each sample with
:func:`by_reference` (one ``ray.put``, serialized once) and the queue only moves the small :class:`SampleRef`; the
consumer fetches a whole update's payloads with one ``ray.get`` (:func:`resolve_refs`).

The queue keeps the items of its last :data:`HELD_BATCHES` gets referenced after handing them out. A reference
nested in a sample travels producer -> queue -> consumer, and Ray's counting of such second-hand borrowers can lose
the race with the queue dropping its own copy: the producer's entry was then deleted before the consumer fetched it
(``ReferenceCountingAssertionError``, seen once in a fully-async run). The consumer fetches a batch before asking for
the next one, so holding two batches keeps every payload alive until it is read, at the cost of two batches of
object-store memory.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

__all__ = [
    "END_OF_STREAM",
    "CoalescingQueueWriter",
    "MessageQueue",
    "MessageQueueClient",
    "QueueClosedError",
    "SampleRef",
    "by_reference",
    "by_reference_many",
    "resolve_refs",
]

# Put by the rollouter after its last sample: the trainer stops after consuming everything before it.
END_OF_STREAM = "__verl_end_of_stream__"
# Handed-out batches the queue keeps referenced until later gets (see the module docstring).
HELD_BATCHES = 2


class QueueClosedError(RuntimeError):
    """The queue was closed (by either side); the message carries the closer's reason."""


@dataclass(frozen=True)
class SampleRef:
    """A queued sample that lives in the Ray object store; ``ref`` is nested, so passing this to the queue actor
    moves the reference, never the payload. With ``position`` set, ``ref`` holds a list of samples put together
    (:func:`by_reference_many`) and this sample is the entry at ``position``."""

    ref: Any  # ray.ObjectRef, owned by the producer
    index: int | None = None
    position: int | None = None


def by_reference(sample: Any, index: int | None = None) -> SampleRef:
    """Serialize ``sample`` once into the object store and return the handle to queue."""
    import ray

    return SampleRef(ray.put(sample), index)


def by_reference_many(samples: list[Any], indices: list[int | None] | None = None) -> list[SampleRef]:
    """One handle per sample, all sharing one object-store entry: a ``ray.put`` costs about a millisecond whatever
    the size of a small sample, so samples queued together are put together. The entry lives until the last of its
    handles is dropped."""
    import ray

    indices = list(indices) if indices is not None else [None] * len(samples)
    if len(indices) != len(samples):
        raise ValueError(f"by_reference_many: {len(samples)} samples but {len(indices)} indices")
    if len(samples) == 1:
        return [by_reference(samples[0], indices[0])]
    ref = ray.put(list(samples))
    return [SampleRef(ref, index, position) for position, index in enumerate(indices)]


def resolve_refs(items: list[Any], timeout_s: float) -> list[Any]:
    """``items`` with every :class:`SampleRef` replaced by its payload (one ``ray.get`` for all of them; an entry
    shared by several handles is fetched once).

    Raises:
        TimeoutError: the payloads were not fetched within ``timeout_s`` (names how many).
        RuntimeError: a payload is gone (its producer died), with Ray's reason.
    """
    import ray

    positions = [i for i, item in enumerate(items) if isinstance(item, SampleRef)]
    if not positions:
        return list(items)
    refs = list({items[i].ref: None for i in positions})
    try:
        fetched = dict(zip(refs, ray.get(refs, timeout=timeout_s), strict=True))
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(
            f"message queue: {len(positions)} queued sample payload(s) not fetched from the object "
            f"store within {timeout_s:g}s"
        ) from None
    except ray.exceptions.ObjectLostError as exc:
        raise RuntimeError(f"message queue: a queued sample's payload is lost (did its producer die?): {exc}") from exc
    out = list(items)
    for i in positions:
        payload = fetched[items[i].ref]
        out[i] = payload if items[i].position is None else payload[items[i].position]
    return out


class CoalescingQueueWriter:
    """The producer's side of a MessageQueue actor: puts made in the same turn of the caller's event loop travel in
    one ``put_many`` call (a Ray actor call costs more than a small sample's bytes) and, with ``by_reference``, are
    put into the object store together (:func:`by_reference_many`); each caller still waits for its own item to be
    queued and sees the call's error. ``coalesce=False`` (``async_training.coalesce_queue_puts=false``) sends every
    item in a call and an object-store put of its own, to measure what coalescing saves."""

    def __init__(self, queue: Any, timeout_s: float, by_reference: bool = True, *, coalesce: bool = True) -> None:
        self.queue = queue
        self.timeout_s = float(timeout_s)
        self.by_reference = bool(by_reference)
        self.coalesce = bool(coalesce)
        self._pending: list[tuple[Any, int | None, asyncio.Future]] = []
        self._sends: set[asyncio.Task] = set()
        self.call_sizes: collections.deque[int] = collections.deque(maxlen=1024)  # items per recent call

    async def put(self, item: Any, what: str, index: int | None = None) -> None:
        """Queue ``item`` (``index`` goes into its SampleRef); returns once it is in the queue."""
        loop = asyncio.get_running_loop()
        queued: asyncio.Future = loop.create_future()
        if not self.coalesce:
            await self._send([(item, index, queued)], what)
            await queued
            return
        self._pending.append((item, index, queued))
        if len(self._pending) == 1:  # the first put of this turn schedules the send
            task = loop.create_task(self._send_turn(what))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        await queued

    async def _send_turn(self, what: str) -> None:
        await asyncio.sleep(0)  # let the other puts of this turn join
        pending, self._pending = self._pending, []
        await self._send(pending, what)

    async def _send(self, pending: list[tuple[Any, int | None, asyncio.Future]], what: str) -> None:
        from verl.experimental.separation.deaths import MESSAGE_QUEUE, await_from

        self.call_sizes.append(len(pending))
        label = what if len(pending) == 1 else f"{what} (with {len(pending) - 1} more)"
        try:
            items = [item for item, _, _ in pending]
            if self.by_reference:
                items = by_reference_many(items, [index for _, index, _ in pending])
            await await_from(
                self.queue.put_many.remote(items, self.timeout_s),
                role=MESSAGE_QUEUE,
                method="put_many",
                actor=self.queue,
                timeout_s=self.timeout_s + 30,
                doing=f"the rollouter was putting: {label}",
            )
        except BaseException as exc:
            for _, _, queued in pending:
                if not queued.done():
                    queued.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for _, _, queued in pending:
            if not queued.done():
                queued.set_result(None)


class MessageQueue:
    """Bounded FIFO of samples.

    Args:
        max_queue_size: items buffered at most; ``put`` waits for room (backpressure) up to its timeout.
    """

    def __init__(self, max_queue_size: int) -> None:
        if int(max_queue_size) < 1:
            raise ValueError(f"MessageQueue: max_queue_size must be >= 1, got {max_queue_size}")
        self.max_queue_size = int(max_queue_size)
        self._items: collections.deque[Any] = collections.deque()
        self._handed_out: collections.deque[list[Any]] = collections.deque(maxlen=HELD_BATCHES)
        self._changed: asyncio.Condition | None = None
        self._closed_reason: str | None = None
        self.total_put = 0
        self.total_get = 0
        self.max_seen_size = 0

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _raise_if_closed(self, what: str) -> None:
        if self._closed_reason is not None:
            raise QueueClosedError(f"message queue closed while {what}: {self._closed_reason}")

    async def put(self, item: Any, timeout_s: float = 600.0) -> int:
        """Append ``item``; waits for room at most ``timeout_s``. Returns the queue size after the put."""
        return await self.put_many([item], timeout_s)

    async def put_many(self, items: list[Any], timeout_s: float = 600.0) -> int:
        """Append ``items`` in order, each as soon as there is room, all within ``timeout_s``; one actor call for
        many samples. Returns the queue size after the last one. On a timeout the items already appended stay
        queued and the error says how many."""
        cond = self._condition()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with cond:
            for done, item in enumerate(items):
                try:
                    await asyncio.wait_for(
                        cond.wait_for(
                            lambda: self._closed_reason is not None or len(self._items) < self.max_queue_size
                        ),
                        timeout=max(0.0, deadline - loop.time()),
                    )
                except asyncio.TimeoutError:
                    raise TimeoutError(
                        f"message queue put: no room within {timeout_s:g}s (size {len(self._items)} of "
                        f"{self.max_queue_size}); {done} of {len(items)} item(s) of this call queued; is the trainer "
                        "still consuming?"
                    ) from None
                self._raise_if_closed("putting a sample")
                self._items.append(item)
                if item != END_OF_STREAM:
                    self.total_put += 1
                self.max_seen_size = max(self.max_seen_size, len(self._items))
                cond.notify_all()
            return len(self._items)

    async def get(self, count: int = 1, timeout_s: float = 600.0) -> list[Any]:
        """Take ``count`` items in FIFO order, waiting at most ``timeout_s`` for them to arrive.

        Stops early at END_OF_STREAM (returned as the last item, and left in the queue for later gets).
        """
        if int(count) < 1:
            raise ValueError(f"MessageQueue.get: count must be >= 1, got {count}")
        cond = self._condition()
        taken: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with cond:
            while len(taken) < count:
                self._raise_if_closed(f"waiting for {count - len(taken)} more sample(s)")
                if self._items:
                    if self._items[0] == END_OF_STREAM:
                        taken.append(END_OF_STREAM)
                        break
                    taken.append(self._items.popleft())
                    self.total_get += 1
                    cond.notify_all()
                    continue
                remaining = deadline - loop.time()
                try:
                    if remaining <= 0:
                        raise asyncio.TimeoutError
                    await asyncio.wait_for(cond.wait(), timeout=remaining)
                except asyncio.TimeoutError:
                    # Give back what was taken so a retry sees every sample exactly once.
                    for item in reversed(taken):
                        self._items.appendleft(item)
                    self.total_get -= len(taken)
                    raise TimeoutError(
                        f"message queue get: {len(taken)} of {count} sample(s) arrived within {timeout_s:g}s"
                    ) from None
        self._handed_out.append(list(taken))  # keeps nested payload references alive until the consumer read them
        return taken

    async def close(self, reason: str) -> None:
        """Refuse further puts/gets; every waiter raises QueueClosedError(reason). The first reason is kept."""
        cond = self._condition()
        async with cond:
            if self._closed_reason is None:
                self._closed_reason = str(reason)
            cond.notify_all()

    async def size(self) -> int:
        return sum(1 for item in self._items if item != END_OF_STREAM)

    async def get_statistics(self) -> dict[str, Any]:
        return {
            "queue/size": sum(1 for item in self._items if item != END_OF_STREAM),
            "queue/max_size": self.max_queue_size,
            "queue/max_seen_size": self.max_seen_size,
            "queue/total_put": self.total_put,
            "queue/total_get": self.total_get,
            "queue/closed": self._closed_reason is not None,
        }


class MessageQueueClient:
    """Calls on a ``MessageQueue`` actor handle, async and blocking, each bounded by ``timeout_s`` (verl's client
    class). Samples are put by reference, as the rollouter puts them."""

    def __init__(self, queue_actor: Any, timeout_s: float = 600.0) -> None:
        self.queue_actor = queue_actor
        self.timeout_s = float(timeout_s)

    async def put_sample(self, sample: Any) -> int:
        return await self.queue_actor.put.remote(by_reference(sample), self.timeout_s)

    async def get_sample(self) -> Any:
        """The next sample (waiting up to ``timeout_s``), or None once the stream has ended."""
        item = (await self.queue_actor.get.remote(1, self.timeout_s))[0]
        if item == END_OF_STREAM:
            return None
        return (await asyncio.to_thread(resolve_refs, [item], self.timeout_s))[0]

    async def get_queue_size(self) -> int:
        return await self.queue_actor.size.remote()

    async def get_statistics(self) -> dict[str, Any]:
        return await self.queue_actor.get_statistics.remote()

    async def shutdown(self, reason: str = "client shut the queue down") -> None:
        await self.queue_actor.close.remote(reason)

    def get_sample_sync(self) -> Any:
        import ray

        item = ray.get(self.queue_actor.get.remote(1, self.timeout_s), timeout=self.timeout_s + 30)[0]
        return None if item == END_OF_STREAM else resolve_refs([item], self.timeout_s)[0]

    def get_queue_size_sync(self) -> int:
        import ray

        return ray.get(self.queue_actor.size.remote(), timeout=self.timeout_s)

    def get_statistics_sync(self) -> dict[str, Any]:
        import ray

        return ray.get(self.queue_actor.get_statistics.remote(), timeout=self.timeout_s)
