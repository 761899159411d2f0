"""AsyncLLMServerManager: which rollout replica serves each request.

- Least loaded: a new request goes to the live replica with the fewest requests in flight (ties: the one that
  has served fewer requests so far), so a slow replica does not collect a queue while another idles.
- Sticky: later turns of the same ``request_id`` (a multi-turn sample keeps its id) go back to the replica that
  served the first turn, where its prefix is still warm. The id -> replica map is a bounded LRU.
- Every request has a timeout naming the request and the replica.
- A replica whose actor died is dropped and the request retried on a live one, so a lost replica costs time,
  not samples.

Replicas are anything with ``async generate(prompt_ids, sampling_params, request_id) -> TokenOutput``: a
``StandaloneReplica``, a ``RolloutServer`` in this process, or a :class:`WorkerRankReplica` (one rank of a hybrid actor
group).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Any

from verl.workers.rollout.base import TokenOutput

__all__ = [
    "AllReplicasDeadError",
    "AsyncLLMServerManager",
    "ReplicaDiedError",
    "RoutingStats",
    "check_text_only_request",
    "is_replica_death",
    "replica_death_line",
]

logger = logging.getLogger(__name__)

_HAS_TIMEOUT_CONTEXT = hasattr(asyncio, "timeout")  # Python 3.11+


# generate() keywords of verl's server client that carry no meaning for a text-only replica when empty/None
_IGNORED_HINTS = ("priority", "mm_processor_output")


def check_text_only_request(request_id: str, **extra: Any) -> None:
    """Refuse a generate call that carries media (or an argument nobody knows): the replicas serve token ids."""
    for key, value in extra.items():
        if key in _IGNORED_HINTS:
            if key == "mm_processor_output" and value is not None:
                raise NotImplementedError(
                    f"request {request_id}: mm_processor_output given, but the rollout replicas are text-only"
                )
            continue
        if key not in ("image_data", "video_data", "audio_data"):
            raise TypeError(
                f"AsyncLLMServerManager.generate (request {request_id}) got an unexpected keyword argument {key!r}"
            )
        if value is not None and len(value) > 0:
            raise NotImplementedError(
                f"request {request_id}: {key} given, but the rollout replicas are text-only: this verl build has no "
                "multimodal rollout (the engines take token ids only)"
            )


class AllReplicasDeadError(RuntimeError):
    """No rollout replica is left to route to; the message names each replica's death (rank and node when known).
    Unlike one failed request, nothing can be retried: callers must stop, not drop the sample."""


class ReplicaDiedError(RuntimeError):
    """Raised by a replica handle when the process serving it is gone (retried elsewhere by the manager)."""


def is_replica_death(exc: BaseException) -> bool:
    """True for errors that mean "this replica's process is gone", as opposed to a bad request."""
    if isinstance(exc, ReplicaDiedError):
        return True
    from verl.single_controller.ray.errors import WorkerDiedError

    if isinstance(exc, WorkerDiedError) and exc.rank is not None:  # a standalone replica, named by rank and node
        return True
    try:
        import ray.exceptions as rex
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    return isinstance(exc, rex.RayActorError | rex.ActorUnavailableError)


def replica_death_line(index: int, exc: BaseException) -> str:
    """One line naming the dead replica ``index`` of a router: the first line of its WorkerDiedError (``rollout
    replica rank 1 died during generate() on node ..., pid ...``), prefixed with the router's index when that is
    not the rank the error names; a bare Ray error (a replica that does not name itself) as ``rollout replica
    <index> died: <first line>``."""
    from verl.single_controller.ray.errors import WorkerDiedError, first_line

    line = first_line(exc)
    if isinstance(exc, WorkerDiedError) and exc.rank is not None:
        return line if exc.rank == index else f"rollout replica {index}: {line}"
    return f"rollout replica {index} died: {type(exc).__name__}: {line}"


@dataclass
class RoutingStats:
    """What the manager did, for tests and metrics."""

    routed: list[int]  # requests sent to each replica (retries included)
    in_flight: list[int]
    sticky_hits: int
    retries: int
    dead: list[int]
    sessions: int


class AsyncLLMServerManager:
    """Route generate calls over ``replicas``.

    Args:
        replicas: the replica handles, in a fixed order (their index names them in errors and stats).
        max_sessions: bound of the sticky request_id -> replica LRU.
        request_timeout_s: limit on one generate call (None: no limit).
    """

    def __init__(self, replicas: list[Any], *, max_sessions: int = 10000, request_timeout_s: float | None = 3600.0):
        if not replicas:
            raise ValueError("AsyncLLMServerManager needs at least one rollout replica")
        if max_sessions < 1:
            raise ValueError(f"AsyncLLMServerManager: max_sessions must be >= 1, got {max_sessions}")
        self.replicas = list(replicas)
        self.max_sessions = int(max_sessions)
        self.request_timeout_s = request_timeout_s
        self._in_flight = [0] * len(self.replicas)
        self._routed = [0] * len(self.replicas)
        self._dead: set[int] = set()
        self._deaths: dict[int, str] = {}  # replica index -> the first line of the error that showed its death
        self._sessions: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._sticky_hits = 0
        self._retries = 0

    # ------------------------------------------------------------------ routing

    def _live(self) -> list[int]:
        return [i for i in range(len(self.replicas)) if i not in self._dead]

    def _choose(self, request_id: str) -> int:
        live = self._live()
        if not live:
            raise AllReplicasDeadError(f"request {request_id}: {self._all_dead()}")
        index = self._sessions.get(request_id)
        if index is not None and index not in self._dead:
            self._sessions.move_to_end(request_id)
            self._sticky_hits += 1
            return index
        index = min(live, key=lambda i: (self._in_flight[i], self._routed[i], i))
        self._sessions[request_id] = index
        self._sessions.move_to_end(request_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return index

    def _mark_dead(self, index: int, request_id: str, exc: BaseException) -> None:
        """Take replica ``index`` out of the routing. Logged once per replica, as one line that starts with what
        its error says (role, rank, node, pid, the call: see :func:`replica_death_line`), never Ray's whole text."""
        from verl.single_controller.ray.errors import first_line

        line = replica_death_line(index, exc)
        if index not in self._dead:
            live = [i for i in self._live() if i != index]
            logger.warning(
                "%s (seen by request %s); routing around it: %s",
                line,
                request_id,
                f"replica(s) {live} left" if live else "no replica left",
            )
        self._dead.add(index)
        self._deaths.setdefault(index, first_line(exc))
        for rid in [rid for rid, i in self._sessions.items() if i == index]:
            del self._sessions[rid]

    # ------------------------------------------------------------------ public

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Generate on the chosen replica; retried on another one if that replica's process died.

        The multimodal arguments and the hints verl's loops pass (``priority``, ``mm_processor_output``) are
        accepted so that such loops run unchanged; the replicas are text-only, so actual media are refused.
        """
        if kwargs or image_data is not None or video_data is not None or audio_data is not None:
            check_text_only_request(
                request_id, image_data=image_data, video_data=video_data, audio_data=audio_data, **kwargs
            )
        del mm_processor_kwargs  # only meaningful with media
        while True:
            index = self._choose(request_id)
            self._in_flight[index] += 1
            self._routed[index] += 1
            try:
                call = self.replicas[index].generate(list(prompt_ids), dict(sampling_params), request_id)
                if self.request_timeout_s is None:
                    return await call
                if _HAS_TIMEOUT_CONTEXT:  # no extra task per request, unlike wait_for
                    async with asyncio.timeout(self.request_timeout_s):
                        return await call
                return await asyncio.wait_for(call, timeout=self.request_timeout_s)
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"request {request_id}: rollout replica {index} gave no answer within {self.request_timeout_s:g}s"
                ) from None
            except Exception as exc:
                if not is_replica_death(exc):
                    raise
                self._mark_dead(index, request_id, exc)
                self._retries += 1
                if not self._live():
                    raise AllReplicasDeadError(f"request {request_id}: {self._all_dead()}") from exc
            finally:
                self._in_flight[index] -= 1

    def _all_dead(self) -> str:
        deaths = "; ".join(f"replica {i}: {self._deaths.get(i, 'died')}" for i in sorted(self._dead))
        return f"every rollout replica has died ({len(self._dead)} of {len(self.replicas)}): {deaths}"

    def stats(self) -> RoutingStats:
        return RoutingStats(
            routed=list(self._routed),
            in_flight=list(self._in_flight),
            sticky_hits=self._sticky_hits,
            retries=self._retries,
            dead=sorted(self._dead),
            sessions=len(self._sessions),
        )
