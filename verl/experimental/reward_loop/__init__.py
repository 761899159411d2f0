"""verl's reward loop: per-sample async reward managers (:mod:`.reward_manager`), the Ray workers that run them
(:mod:`.reward_loop`), the adapter that lets the trainer use them as batch managers (:mod:`.adapter`) and the
migration of legacy reward keys (:mod:`.migrate`)."""

from verl.experimental.reward_loop.migrate import migrate_legacy_reward_impl
from verl.experimental.reward_loop.reward_loop import RewardLoopManager, RewardLoopWorker
from verl.experimental.reward_loop.reward_model import RewardModelManager

__all__ = ["RewardLoopManager", "RewardLoopWorker", "RewardModelManager", "migrate_legacy_reward_impl"]
