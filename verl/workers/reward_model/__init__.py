"""Model-based reward: score samples with a sequence-classification checkpoint."""

from verl.workers.reward_model.hf_reward_model import HFRewardModel

__all__ = ["HFRewardModel"]
