"""verl's module path of the reward-manager base class; the class itself lives in :mod:`.base`."""

from verl.workers.reward_manager.base import AbstractRewardManager, RawRewardFn

__all__ = ["AbstractRewardManager", "RawRewardFn"]
