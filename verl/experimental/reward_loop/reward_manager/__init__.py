"""Reward-loop managers (``run_single`` per sample, :class:`~.base.RewardManagerBase`) and their registry."""

from verl.experimental.reward_loop.reward_manager.registry import (  # noqa: I001 (the registry comes first)
    REWARD_LOOP_MANAGER_REGISTRY,
    get_reward_manager_cls,
    register,
)
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
from verl.experimental.reward_loop.reward_manager.limited import RateLimitedRewardManager
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

__all__ = [
    "DAPORewardManager",
    "NaiveRewardManager",
    "REWARD_LOOP_MANAGER_REGISTRY",
    "RateLimitedRewardManager",
    "RewardManagerBase",
    "get_reward_manager_cls",
    "register",
]
