"""Model-based reward: score samples with a sequence-classification checkpoint."""

from verl.workers.reward_model.hf_reward_model import HFRewardModel
from verl.workers.reward_model.worker import RewardModelWorker

__all__ = ["HFRewardModel", "RewardModelWorker"]
