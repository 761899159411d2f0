"""verl's ``RewardModelManager``: reward-model servers (vLLM/SGLang replicas behind a router) for the reward loop.

Not part of this build: ``main_ppo`` scores a reward model with its own reward-model worker
(``reward.reward_model.enable``), and a custom reward function can query any server it is pointed at. The name
imports so that recipes load; building it raises :class:`~verl.utils.extras.MissingExtraError`.
"""

from __future__ import annotations

from verl.utils.extras import unavailable_class

__all__ = ["RewardModelManager"]

RewardModelManager = unavailable_class(
    "RewardModelManager",
    __name__,
    "reward-model servers for the reward loop (vLLM/SGLang behind verl's router)",
    extra="vllm",
    reason="this package scores reward models with main_ppo's reward-model worker (reward.reward_model.enable)",
)
