"""Generation outputs that arrive scored, as verl's reward loop hands them to a recipe's ``fit()``.

verl 0.9 scores every trajectory inside the agent loop, so the batch ``async_rollout_manager.generate_sequences``
returns already holds ``rm_scores`` (each score at its row's last response token), one non-tensor column per
reward-extra key (listed in ``meta_info["reward_extra_keys"]``) and ``meta_info["timing"]``; recipes read them with
``extract_reward(batch)``. Our trainer scores in its own reward stage by default (``reward.launch_reward_fn_async``
moves it into the loop), so the manager a recipe sees is wrapped: a batch that comes back unscored is scored here,
on the driver, with the trainer's reward manager.

``DriverRewardLoop`` is the same scoring offered under verl's ``reward_loop_manager.compute_rm_score(batch)`` name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from verl.protocol import DataProto
from verl.trainer.ppo.reward import compute_reward, scored_batch

__all__ = ["DriverRewardLoop", "ScoredRolloutManager", "attach_scores"]

REWARD_EXTRA_KEYS = "reward_extra_keys"


class DriverRewardLoop:
    """Scores batches with a reward manager in this process: verl's ``RewardLoopManager.compute_rm_score``
    contract (a DataProto of ``rm_scores`` plus the extra-info columns) without starting scoring actors."""

    def __init__(self, reward_fn: Any) -> None:
        if reward_fn is None:
            raise ValueError("DriverRewardLoop needs a reward manager (reward_fn); none is configured")
        self.reward_fn = reward_fn
        self.last_metrics: dict[str, float] = {}

    def compute_rm_score(self, batch: DataProto) -> DataProto:
        """``rm_scores`` of ``batch`` and one non-tensor column per reward-extra key; the keys are listed in the
        result's ``meta_info["reward_extra_keys"]``."""
        reward_tensor, extra, self.last_metrics = compute_reward(batch, self.reward_fn, return_metrics=True)
        return scored_batch(reward_tensor, extra)


def attach_scores(batch: DataProto, scores: DataProto) -> DataProto:
    """``batch`` with the tensors, columns and extra-key list of ``scores`` (a ``compute_rm_score`` result)."""
    keys = list(batch.meta_info.get(REWARD_EXTRA_KEYS) or [])
    keys.extend(key for key in scores.meta_info.get(REWARD_EXTRA_KEYS, []) if key not in keys)
    for key, value in scores.batch.items():
        batch.batch[key] = value
    batch.non_tensor_batch.update(scores.non_tensor_batch)
    batch.meta_info[REWARD_EXTRA_KEYS] = keys
    return batch


class ScoredRolloutManager:
    """The trainer's agent-loop manager as verl's ``async_rollout_manager``: ``generate_sequences`` returns scored
    batches (``rm_scores``) with ``meta_info["timing"]``. With a reward model the scores come later, from its
    worker group (``_compute_reward_colocate``), as in verl; every other attribute is the manager's own."""

    def __init__(
        self, manager: Any, reward_loop: DriverRewardLoop | None, before_generate: Callable[[], None] | None = None
    ) -> None:
        self.manager = manager
        self.reward_loop = reward_loop
        self.before_generate = before_generate  # e.g. wake engines a recipe's fit() put to sleep

    def generate_sequences(self, batch: DataProto) -> DataProto:
        if self.before_generate is not None:
            self.before_generate()
        return self._scored(self.manager.generate_sequences(batch))

    async def generate_sequences_async(self, batch: DataProto) -> DataProto:
        if self.before_generate is not None:
            await asyncio.to_thread(self.before_generate)
        return self._scored(await self.manager.generate_sequences_async(batch))

    def _scored(self, output: DataProto) -> DataProto:
        output.meta_info.setdefault("timing", {})
        if self.reward_loop is not None and "rm_scores" not in output.batch.keys():
            output = attach_scores(output, self.reward_loop.compute_rm_score(output))
        return output

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)
