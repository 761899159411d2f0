"""The trainer generates while it waits (``async_training.trainer_generates_while_waiting``; ours, not upstream's).

On a small host the trainer's processes sit idle while they wait for rollout groups. With this lever the trainer's
actor group is a hybrid actor+rollout group: each rank hosts a rollout engine (its own copy of the weights, loaded
with every pushed version, so its tokens carry a version the staleness budget already allows). Those ranks are extra
replicas of the rollouter's server manager, open to new requests only while the trainer is not computing:

- at a weight sync, once the new version is in every engine, they open before the rollouter resumes, so the groups
  started then and the requests aborted by the sync spread over them and the standalone replicas;
- when the trainer starts waiting on the queue they open (if closed);
- when the trainer has its groups they close: nothing new is routed there, and what they hold is aborted and resumes,
  with its tokens, on the standalone replicas (the partial-rollout path), so the trainer computes undisturbed.

:class:`TrainerReplicaRollouter` is the rollouter side (its ``open_trainer_replicas`` / ``close_trainer_replicas``
are called by the trainer); :class:`CountingReplica` counts what a trainer-side replica generated.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from verl.experimental.fully_async_policy.rollouter import Rollouter
from verl.workers.rollout.base import TokenOutput

__all__ = [
    "TRAINER_REPLICA_KEY",
    "CountingReplica",
    "TrainerReplicaRollouter",
    "check_trainer_replica_config",
]

TRAINER_REPLICA_KEY = "async_training.trainer_generates_while_waiting"

# how long a close keeps aborting requests that reach a trainer-side replica after it was closed (sent just before)
_DRAIN_TIMEOUT_S = 30.0
_DRAIN_SLICE_S = 0.05


def check_trainer_replica_config(async_training: Any) -> bool:
    """Whether the lever is on; refused without partial rollout (how a closed replica hands its requests on) and
    with ``keep_requests_through_sync`` (the trainer's ranks cannot hold generation without aborting)."""
    enabled = bool(getattr(async_training, "trainer_generates_while_waiting", False))
    if enabled and not bool(async_training.partial_rollout):
        raise ValueError(
            f"{TRAINER_REPLICA_KEY}=true needs async_training.partial_rollout=true: a trainer-side replica hands "
            "the requests it holds to the standalone replicas (abort and resume with their tokens) whenever the "
            f"trainer computes; set partial_rollout=true or {TRAINER_REPLICA_KEY}=false"
        )
    if enabled and bool(getattr(async_training, "keep_requests_through_sync", False)):
        raise ValueError(
            f"{TRAINER_REPLICA_KEY}=true does not combine with async_training.keep_requests_through_sync=true: the "
            "trainer's ranks serve the rollout contract without pause_generation; set one of them to false"
        )
    return enabled


class CountingReplica:
    """A replica that counts the requests it finished and the tokens it generated (aborted ones included)."""

    def __init__(self, replica: Any) -> None:
        self.replica = replica
        self.finished = 0
        self.tokens = 0

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        out = await self.replica.generate(prompt_ids, sampling_params, request_id)
        self.tokens += len(out.token_ids)
        if out.stop_reason != "aborted":
            self.finished += 1
        return out

    def __getattr__(self, name: str) -> Any:
        if name == "replica":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.replica, name)

    def __repr__(self) -> str:
        return f"CountingReplica({self.replica!r})"


class TrainerReplicaRollouter(Rollouter):
    """The rollouter, plus replicas on the trainer's ranks that open and close as the trainer waits or computes.

    ``add_trainer_replicas`` (before ``fit``) appends them, closed; their aborts and resumes at a weight sync come
    with the rollouter's (they are in ``self.replicas``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trainer_replicas: list[CountingReplica] = []
        self._trainer_indices: list[int] = []
        self._opened_at: float | None = None
        self._counted = (0, 0)  # (finished, tokens) when last opened
        self.stats.update({"trainer_replica_requests": 0, "trainer_replica_tokens": 0, "trainer_replica_opens": 0})

    def add_trainer_replicas(self, replicas: list[Any]) -> int:
        """Route to ``replicas`` (the trainer's ranks) too, while they are open; returns how many there are."""
        if self.stats["groups_started"]:
            raise RuntimeError("rollouter.add_trainer_replicas must be called before fit starts generating")
        wrapped = [CountingReplica(r) for r in replicas]
        self._trainer_indices = self.worker.server_manager.add_replicas(wrapped, closed=True)
        self.trainer_replicas.extend(wrapped)
        self.replicas.extend(wrapped)
        return len(wrapped)

    def _counts(self) -> tuple[int, int]:
        return sum(r.finished for r in self.trainer_replicas), sum(r.tokens for r in self.trainer_replicas)

    async def open_trainer_replicas(self) -> bool:
        """Let the trainer-side replicas serve new requests (their engines re-opened first); False when they were
        open already."""
        if self._opened_at is not None or not self.trainer_replicas:
            return False
        await asyncio.gather(*(r.resume() for r in self.trainer_replicas))
        self.worker.server_manager.open_replicas(self._trainer_indices)
        self._opened_at = time.perf_counter()
        self._counted = self._counts()
        self.stats["trainer_replica_opens"] += 1
        return True

    async def close_trainer_replicas(self) -> dict[str, float]:
        """Route nothing new to the trainer-side replicas and hand on what they hold (abort: each request resumes
        with its tokens on an open replica); returns how long they were open and what they generated meanwhile."""
        if self._opened_at is None:
            return {"open_s": 0.0, "requests": 0.0, "tokens": 0.0}
        manager = self.worker.server_manager
        manager.close_replicas(self._trainer_indices)
        # A request sent just before the close may reach an engine after the abort: abort again until none is left
        # there (each abort is followed by a resume, so a late request is admitted, then aborted, never parked).
        deadline = time.monotonic() + _DRAIN_TIMEOUT_S
        while True:
            await asyncio.gather(*(r.abort_all() for r in self.trainer_replicas))
            await asyncio.gather(*(r.resume() for r in self.trainer_replicas))
            if manager.in_flight_on(self._trainer_indices) == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(_DRAIN_SLICE_S)
        open_s = time.perf_counter() - self._opened_at
        self._opened_at = None
        finished, tokens = self._counts()
        requests, generated = finished - self._counted[0], tokens - self._counted[1]
        self.stats["trainer_replica_requests"] += requests
        self.stats["trainer_replica_tokens"] += generated
        return {"open_s": open_s, "requests": float(requests), "tokens": float(generated)}
