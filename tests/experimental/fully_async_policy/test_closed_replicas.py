"""Replicas closed to new requests (the trainer-side replica of ``trainer_generates_while_waiting``): nothing new is
routed there, and a request they held that comes back aborted resumes, with its tokens, on an open replica."""

from __future__ import annotations

import asyncio

from verl.experimental.fully_async_policy.server_manager import PartialRolloutServerManager
from verl.experimental.fully_async_policy.trainer_replica import CountingReplica
from verl.workers.rollout.base import TokenOutput


class AbortableReplica:
    """One token every ``step_s`` seconds; ``abort_all`` returns what each running request has, as aborted."""

    def __init__(self, version: int, step_s: float = 0.01) -> None:
        self.version = version
        self.step_s = step_s
        self.served: list[str] = []
        self._aborted: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._aborted is None:
            self._aborted = asyncio.Event()
        return self._aborted

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.served.append(request_id)
        aborted = self._event()
        tokens: list[int] = []
        for i in range(int(sampling_params["max_tokens"])):
            if aborted.is_set():
                return TokenOutput(tokens, stop_reason="aborted", extra={"weight_version": self.version})
            await asyncio.sleep(self.step_s)
            tokens.append(100 + len(prompt_ids) + i)
        return TokenOutput(tokens, stop_reason="length", extra={"weight_version": self.version})

    async def abort_all(self):
        self._event().set()

    async def resume(self):
        self._aborted = asyncio.Event()


def test_closed_replica_gets_no_request_and_hands_on_what_it_held():
    async def scenario():
        standalone, trainer = AbortableReplica(3), AbortableReplica(3)
        manager = PartialRolloutServerManager([standalone], request_timeout_s=30)
        manager.version = 3
        counted = CountingReplica(trainer)
        [index] = manager.add_replicas([counted], closed=True)
        params = {"max_tokens": 20}

        # closed: every new request goes to the standalone replica
        await asyncio.gather(*(manager.generate(f"c{i}", prompt_ids=[1, 2], sampling_params=params) for i in range(3)))
        assert trainer.served == [] and len(standalone.served) == 3

        # open: least loaded routing spreads over both
        manager.open_replicas([index])
        tasks = [
            asyncio.ensure_future(manager.generate(f"o{i}", prompt_ids=[1, 2], sampling_params=params))
            for i in range(2)
        ]
        await asyncio.sleep(0.05)
        assert manager.in_flight_on([index]) == 1
        # close and abort: the request held there resumes on the standalone replica with the tokens it has
        manager.close_replicas([index])
        await counted.abort_all()
        await counted.resume()
        outs = await asyncio.gather(*tasks)
        assert manager.in_flight_on([index]) == 0
        for out in outs:
            assert len(out.token_ids) == 20 and out.stop_reason == "length"
            assert out.extra["token_versions"] == [3] * 20 and out.extra["min_global_steps"] == 3
        handed_on = [out for out in outs if out.extra["num_aborts"] == 1]
        assert len(handed_on) == 1
        assert counted.finished == 0 and 0 < counted.tokens < 20
        assert manager.num_aborted == manager.num_resumed == 1
        moved = trainer.served[0]
        assert standalone.served.count(moved) == 1  # resumed once, on the open replica

        # re-opened: it serves (and finishes) again
        manager.open_replicas([index])
        await asyncio.gather(
            *(manager.generate(f"r{i}", prompt_ids=[1], sampling_params={"max_tokens": 3}) for i in range(2))
        )
        assert counted.finished == 1

    asyncio.run(scenario())
