"""verl's ``SGLangRewardModel``: a reward model served by an SGLang engine inside the reward workers.

Not part of this build: model-based rewards are scored with transformers
(:class:`~verl.workers.reward_model.hf_reward_model.HFRewardModel`, ``reward.reward_model.enable=true``). The class
imports and raises ``MissingExtraError`` when built.
"""

from verl.utils.extras import unavailable_class

__all__ = ["SGLangRewardModel"]

SGLangRewardModel = unavailable_class(
    "SGLangRewardModel",
    __name__,
    "an SGLang-served reward model",
    package="sglang",
    extra="sglang",
    reason="reward models are scored with transformers here (verl.workers.reward_model.HFRewardModel)",
)
