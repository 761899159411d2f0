"""Reward managers: decode responses, score them (rule functions in a process pool, or a reward model's scores) and
place each score at the last response token. Select one with ``reward.reward_manager``.

verl's per-sample reward-loop managers (``run_single``) live in :mod:`verl.experimental.reward_loop.reward_manager`;
the trainer accepts their names too (:func:`verl.trainer.ppo.reward.load_reward_manager`)."""

from verl.utils.reward_runner import RewardRunner, ScoreOutcome
from verl.workers.reward_manager.base import AbstractRewardManager
from verl.workers.reward_manager.batch import BatchRewardManager
from verl.workers.reward_manager.dapo import DAPORewardManager
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.prime import PrimeRewardManager
from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY, get_reward_manager_cls, register

__all__ = [
    "AbstractRewardManager",
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "REWARD_MANAGER_REGISTRY",
    "RewardRunner",
    "ScoreOutcome",
    "get_reward_manager_cls",
    "register",
]
