"""PartialRolloutServerManager: the agent loops' server manager that survives weight syncs by itself.

A weight sync aborts the requests in flight (``abort_all`` on every replica). Instead of failing the trajectory or
routing the abort through a cancel queue, this manager treats ``stop_reason == "aborted"`` as "paused": it waits
until the rollouter re-opens it with the new version, then continues generation from prompt + tokens so far with
the remaining token budget, keeping the log-probs it already has (each token's log-prob is the one of the weights
that produced it). Whatever the agent loop does between generate calls (tool calls) is never touched by a sync:
its next generate call simply waits for the gate.

Each call's version tags travel in its result (``TokenOutput.extra``: ``min_global_steps`` / ``max_global_steps``,
verl's names, ``num_aborts``, and ``token_versions``, the version of each token); the agent loops fold them into the
trajectory's ``extra_fields`` (:mod:`verl.experimental.agent_loop.weight_versions`). A call's tokens are tagged with
the ``weight_version`` the replica reports it generated under (the hf server does): a request already on its way to
a replica when a sync began waits there and runs on the new weights, so the version this manager had when it sent
the call would be wrong. Replicas that report no version fall back to the manager's.

Replicas can also be closed to new requests (:meth:`PartialRolloutServerManager.close_replicas`) while staying
live: the trainer-side replica of ``async_training.trainer_generates_while_waiting`` is closed while the trainer
computes, and the requests it held come back aborted and resume, with their tokens, on the open replicas.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager, check_text_only_request
from verl.workers.rollout.base import TokenOutput

__all__ = ["PartialRolloutServerManager"]

logger = logging.getLogger(__name__)


class PartialRolloutServerManager(AsyncLLMServerManager):
    """Route requests like ``AsyncLLMServerManager``; resume aborted ones after the next weight version.

    Args:
        replicas: rollout replica handles.
        resume_timeout_s: how long an aborted request waits for ``resume`` before failing (names the request).
        **kwargs: ``AsyncLLMServerManager`` options (max_sessions, request_timeout_s).
    """

    def __init__(self, replicas: list[Any], *, resume_timeout_s: float = 600.0, **kwargs: Any) -> None:
        super().__init__(replicas, **kwargs)
        self.resume_timeout_s = float(resume_timeout_s)
        self.version = 0
        self._open: asyncio.Event | None = None
        self._paused = False
        self.num_aborted = 0
        self.num_resumed = 0
        self._closed: set[int] = set()

    # ------------------------------------------------------------------ replicas closed to new requests

    def add_replicas(self, replicas: list[Any], *, closed: bool = True) -> list[int]:
        """Append ``replicas`` to the routing (closed to new requests unless ``closed`` is False); returns their
        indices."""
        start = len(self.replicas)
        self.replicas.extend(replicas)
        self._in_flight.extend([0] * len(replicas))
        self._routed.extend([0] * len(replicas))
        indices = list(range(start, len(self.replicas)))
        if closed:
            self._closed.update(indices)
        return indices

    def close_replicas(self, indices: list[int]) -> None:
        """Route no new request (nor a later turn of a sticky session) to ``indices``; what they hold keeps running
        until aborted."""
        self._closed.update(int(i) for i in indices)
        for rid in [rid for rid, i in self._sessions.items() if i in self._closed]:
            del self._sessions[rid]

    def open_replicas(self, indices: list[int]) -> None:
        self._closed.difference_update(int(i) for i in indices)

    def in_flight_on(self, indices: list[int]) -> int:
        """Requests sent to ``indices`` that have not come back yet."""
        return sum(self._in_flight[int(i)] for i in indices)

    def _live(self) -> list[int]:
        """Live replicas open to new requests; the closed live ones when no open one is left (a closed replica
        still serves, which beats failing the request)."""
        live = super()._live()
        open_live = [i for i in live if i not in self._closed]
        return open_live or live

    def _gate(self) -> asyncio.Event:
        if self._open is None:
            self._open = asyncio.Event()
            if not self._paused:
                self._open.set()
        return self._open

    def pause(self) -> None:
        """Close the gate: requests that come back aborted (and new ones) wait for ``resume``."""
        self._paused = True
        self._gate().clear()

    def resume(self, version: int) -> None:
        """Re-open the gate under weight ``version``; waiting requests continue."""
        self.version = int(version)
        self._paused = False
        self._gate().set()

    async def _wait_open(self, request_id: str) -> None:
        gate = self._gate()
        if gate.is_set():
            return
        try:
            await asyncio.wait_for(gate.wait(), timeout=self.resume_timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"request {request_id}: paused for a weight sync and not resumed within {self.resume_timeout_s:g}s"
            ) from None

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **hints: Any
    ) -> TokenOutput:
        """Generate, resuming across aborts; the result covers every token with its log-prob (when asked).
        ``hints`` are the arguments verl's loops pass (``priority``, empty ``image_data``, ...); media are refused
        as by the base manager (the replicas are text-only)."""
        if hints:
            check_text_only_request(request_id, **hints)
        await self._wait_open(request_id)
        prompt = list(prompt_ids)
        max_tokens = sampling_params.get("max_tokens")
        seed = sampling_params.get("seed")
        tokens: list[int] = []
        log_probs: list[float] | None = [] if sampling_params.get("logprobs") else None
        token_versions: list[int] = []
        start_version = self.version
        aborts = 0
        while True:
            version = self.version
            params = dict(sampling_params)
            if tokens and max_tokens is not None:
                params["max_tokens"] = int(max_tokens) - len(tokens)
            if aborts and seed is not None:
                params["seed"] = int(seed) + 7919 * aborts  # a fresh stream for the continuation
            out = await super().generate(request_id, prompt_ids=prompt + tokens, sampling_params=params)
            extra = out.extra or {}
            reported = extra.get("weight_version")
            if reported is not None:
                version = int(reported)
            if not token_versions and not tokens:
                start_version = version
            tokens.extend(out.token_ids)
            # a sync that keeps requests swaps weights mid-call: the replica then reports each token's version
            token_versions.extend(extra.get("token_versions") or [version] * len(out.token_ids))
            version = int(extra.get("weight_version_end", version))
            if log_probs is not None:
                if out.log_probs is None:
                    raise RuntimeError(f"request {request_id}: logprobs were asked for but the replica returned none")
                log_probs.extend(out.log_probs)
            stop_reason = out.stop_reason
            if stop_reason != "aborted":
                break
            aborts += 1
            self.num_aborted += 1
            if max_tokens is not None and len(tokens) >= int(max_tokens):
                stop_reason = "length"
                break
            await self._wait_open(request_id)
            self.num_resumed += 1
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason=stop_reason,
            extra={
                "min_global_steps": start_version,
                "max_global_steps": max(version, start_version),
                "num_aborts": aborts,
                "token_versions": token_versions,
            },
        )
