"""Requests of the hf engine and the policy that decides when waiting requests join the batch.

Every admission costs one prefill forward, whose fixed overhead on a CPU is about that of a decode
step. Admitting the moment one row frees up would double the number of forwards when requests
finish one by one; waiting until a chunk of rows is free trades a little idle capacity for far fewer
prefills. ``bench/rollout_throughput.py`` measures the choice; the default chunk is an eighth of
``max_num_seqs``.
"""

from __future__ import annotations

import asyncio
import collections
import math
from dataclasses import dataclass, field

from verl.workers.rollout.base import TokenOutput
from verl.workers.rollout.hf.sampling import SamplingParams

__all__ = ["Request", "AdmissionPolicy"]


@dataclass
class Request:
    """One ``generate`` call: its prompt, parameters, the tokens so far and the future to resolve."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    future: asyncio.Future
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] | None = None
    stop_reason: str | None = None

    def append(self, token: int, log_prob: float | None) -> bool:
        """Record one sampled token; return True when the request is finished."""
        self.token_ids.append(token)
        if self.log_probs is not None and log_prob is not None:
            self.log_probs.append(log_prob)
        if token in self.stop_ids:
            self.stop_reason = "stop"
        elif len(self.token_ids) >= self.params.max_tokens:
            self.stop_reason = "length"
        return self.stop_reason is not None

    def output(self, stop_reason: str | None = None) -> TokenOutput:
        return TokenOutput(
            token_ids=list(self.token_ids),
            log_probs=None if self.log_probs is None else list(self.log_probs),
            stop_reason=stop_reason or self.stop_reason or "aborted",
        )

    def resolve(self, stop_reason: str | None = None) -> None:
        """Hand the result to the waiting ``generate`` call (no-op if it gave up)."""
        if not self.future.done():
            self.future.set_result(self.output(stop_reason))


class AdmissionPolicy:
    """FIFO admission: fill free rows in chunks of at least ``min_chunk`` (or all that wait)."""

    def __init__(self, max_num_seqs: int, min_chunk: int | None = None):
        if max_num_seqs < 1:
            raise ValueError(f"rollout.max_num_seqs must be >= 1, got {max_num_seqs}")
        self.max_num_seqs = max_num_seqs
        self.min_chunk = min_chunk if min_chunk is not None else max(1, math.ceil(max_num_seqs / 8))
        if self.min_chunk < 1:
            raise ValueError(f"admission chunk must be >= 1, got {self.min_chunk}")

    def select(self, waiting: collections.deque[Request], num_running: int) -> list[Request]:
        """Pop the requests to prefill now from the front of ``waiting``."""
        free = self.max_num_seqs - num_running
        if free <= 0 or not waiting:
            return []
        if num_running > 0 and free < min(self.min_chunk, len(waiting)):
            return []
        return [waiting.popleft() for _ in range(min(free, len(waiting)))]
