"""Replica stand-ins for rollouter tests (importable by Ray workers): no model, instant or failing answers."""

from __future__ import annotations

import asyncio

from verl.workers.rollout.base import TokenOutput


class FailingReplica:
    """Every request fails: every prompt group ends up empty."""

    async def generate(self, prompt_ids, sampling_params, request_id):
        raise ValueError(f"request {request_id}: this replica always fails")

    async def abort_all(self):
        return None

    async def resume(self):
        return None


class SlowReplica:
    """Answers 4 tokens after ``delay_s``; aborts are no-ops."""

    def __init__(self, delay_s: float = 0.01):
        self.delay_s = delay_s

    async def generate(self, prompt_ids, sampling_params, request_id):
        await asyncio.sleep(self.delay_s)
        return TokenOutput(token_ids=[5, 6, 7, 2], log_probs=[-1.0] * 4, stop_reason="stop")

    async def abort_all(self):
        return None

    async def resume(self):
        return None
