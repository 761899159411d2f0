"""Reward-loop managers from synchronous code: the shared reward loop and the batch adapter.

The trainer scores a batch with a blocking call (``reward_fn(data, return_dict=True)``); a reward-loop manager is a
set of coroutines (``run_single`` per sample). :class:`RewardLoopAdapter` bridges the two: it runs one
``run_single`` per row concurrently and assembles the results into what a batch manager returns
(``reward_tensor``, ``reward_extra_info``, ``reward_metrics``).

The coroutines of every adapted manager run on ONE event loop, owned by a daemon thread of this process
(:func:`shared_reward_loop`). One loop, because managers keep asyncio state at class level (the rate limiters of
``rate_limited`` are shared by the training and the validation manager) and asyncio primitives belong to a single
loop; a thread, because the caller may itself be inside a running loop (an async rollout) or in a worker thread.

A row whose ``run_single`` raises, or outlasts ``timeout_s``, scores 0 and is counted in ``reward/num_failed`` /
``reward/num_timeout`` like a failed sample of the batch managers. A synchronous scoring function that hangs keeps
its executor thread busy (threads cannot be killed); use a batch manager (process pool) for untrusted code.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections import defaultdict
from collections.abc import Coroutine
from typing import Any, TypeVar

import torch

from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.protocol import DataProto
from verl.utils.reward_runner import ScoreOutcome
from verl.workers.reward_manager.base import AbstractRewardManager

__all__ = ["RewardLoopAdapter", "build_on_reward_loop", "run_on_reward_loop", "shared_reward_loop"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_LOCK = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None
_THREAD: threading.Thread | None = None


def shared_reward_loop() -> asyncio.AbstractEventLoop:
    """The process's reward loop, started on first use in a daemon thread."""
    global _LOOP, _THREAD
    with _LOCK:
        if _LOOP is not None and _THREAD is not None and _THREAD.is_alive():
            return _LOOP
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=serve, name="verl-reward-loop", daemon=True)
        thread.start()
        ready.wait()
        _LOOP, _THREAD = loop, thread
        return loop


@atexit.register
def _stop_reward_loop() -> None:
    global _LOOP, _THREAD
    with _LOCK:
        loop, thread, _LOOP, _THREAD = _LOOP, _THREAD, None, None
    if loop is not None and thread is not None and thread.is_alive():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def run_on_reward_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the reward loop and block until it is done (from any thread but the loop's own)."""
    loop = shared_reward_loop()
    if threading.current_thread() is _THREAD:
        coro.close()
        raise RuntimeError("a blocking reward-loop call was made from the reward loop itself; await the coroutine")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def build_on_reward_loop(cls: type[RewardManagerBase], **kwargs: Any) -> RewardManagerBase:
    """``cls(**kwargs)`` built on the reward loop's thread, so the manager's ``self.loop`` (and any asyncio state its
    constructor creates) belongs to the loop that will run it."""

    async def build() -> RewardManagerBase:
        return cls(**kwargs)

    return run_on_reward_loop(build())


class RewardLoopAdapter:
    """A reward-loop manager with the batch-manager interface: ``adapter(data, return_dict=False)``.

    Args:
        manager: the :class:`RewardManagerBase` instance; its coroutines run on the shared reward loop (its
            ``loop`` attribute is pointed there).
        num_examine: rows per data source whose score is printed on each call.
        timeout_s: wall-clock limit of one ``run_single`` (``None``: no limit).
    """

    def __init__(self, manager: RewardManagerBase, num_examine: int = 0, timeout_s: float | None = None) -> None:
        if not isinstance(manager, RewardManagerBase):
            raise TypeError(f"RewardLoopAdapter wraps a RewardManagerBase, got {type(manager).__name__}")
        self.manager = manager
        self.num_examine = num_examine
        self.timeout_s = timeout_s
        manager.loop = shared_reward_loop()

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        return await self.manager.run_single(data)

    async def _score_row(self, index: int, row: DataProto) -> tuple[dict[str, Any], ScoreOutcome]:
        name = type(self.manager).__name__
        try:
            call = self.manager.run_single(row)
            output = await (call if self.timeout_s is None else asyncio.wait_for(call, self.timeout_s))
            if not isinstance(output, dict) or "reward_score" not in output:
                raise TypeError(f"{name}.run_single must return a dict with 'reward_score', got {output!r:.120}")
            return output, ScoreOutcome(value=float(output["reward_score"]))
        except asyncio.TimeoutError:
            outcome = ScoreOutcome(error=f"timed out after {self.timeout_s:g}s (reward.timeout_s)", timed_out=True)
        except Exception as err:  # one bad sample scores 0 instead of failing the step
            outcome = ScoreOutcome(error=f"{type(err).__name__}: {err}")
        logger.warning("%s.run_single failed on sample %d (scored 0.0): %s", name, index, outcome.error)
        return {"reward_score": 0.0, "reward_extra_info": {}}, outcome

    async def score_batch(self, data: DataProto) -> list[tuple[dict[str, Any], ScoreOutcome]]:
        """``(run_single output, outcome)`` of every row, scored concurrently."""
        return list(await asyncio.gather(*(self._score_row(i, data[i : i + 1]) for i in range(len(data)))))

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = AbstractRewardManager.from_rm_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        results = run_on_reward_loop(self.score_batch(data))
        scores = [outcome.value if outcome.ok else 0.0 for _, outcome in results]
        extras = [dict(output.get("reward_extra_info") or {}) for output, _ in results]
        reward_tensor = type(self.manager).assemble_rm_scores(data, scores)
        self._examine(data, scores, extras)
        metrics = AbstractRewardManager.failure_metrics([outcome for _, outcome in results])
        return AbstractRewardManager.result(
            reward_tensor, AbstractRewardManager.collect_extra(extras), metrics, return_dict
        )

    def _examine(self, data: DataProto, scores: list[float], extras: list[dict[str, Any]]) -> None:
        if self.num_examine <= 0:
            return
        sources = data.non_tensor_batch.get(self.manager.reward_fn_key)
        printed: dict[Any, int] = defaultdict(int)
        for i, (score, extra) in enumerate(zip(scores, extras)):
            source = sources[i] if sources is not None else None
            if printed[source] >= self.num_examine:
                continue
            printed[source] += 1
            print(f"[{source}] sample {i}: [score] {score} [extra] {extra}")

    def close(self) -> None:
        """Nothing to release: the reward loop is shared and stops with the process."""
