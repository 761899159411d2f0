"""Typed worker configs (frozen dataclasses with ``_target_``); see docs/config.md."""

from verl.workers.config.actor import ActorConfig, CheckpointConfig, FSDPActorConfig, PolicyLossConfig
from verl.workers.config.critic import CriticConfig, FSDPCriticConfig
from verl.workers.config.engine import FSDPEngineConfig
from verl.workers.config.model import BUILTIN_TINY_MODEL, HFModelConfig
from verl.workers.config.optimizer import FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.reward import (
    CustomRewardFunctionConfig,
    RewardConfig,
    RewardModelConfig,
    RewardModelPathConfig,
)
from verl.workers.config.rollout import (
    AgentLoopConfig,
    CheckpointEngineConfig,
    CustomAsyncServerConfig,
    MultiTurnConfig,
    RolloutConfig,
    SamplingConfig,
)

__all__ = [
    "BUILTIN_TINY_MODEL",
    "ActorConfig",
    "AgentLoopConfig",
    "CheckpointConfig",
    "CheckpointEngineConfig",
    "CriticConfig",
    "CustomAsyncServerConfig",
    "CustomRewardFunctionConfig",
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "HFModelConfig",
    "MultiTurnConfig",
    "OptimizerConfig",
    "PolicyLossConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RewardModelPathConfig",
    "RolloutConfig",
    "SamplingConfig",
]
