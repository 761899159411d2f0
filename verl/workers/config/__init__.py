"""Typed worker configs (frozen dataclasses with ``_target_``); see docs/config.md.

verl's Megatron and TorchTitan configs (:mod:`.megatron`, :mod:`.torchtitan`) are here for recipes that build them;
no engine of this package trains with them. The distillation configs live with their losses
(:mod:`verl.trainer.distillation`) and are loaded on first use, which keeps this package free of an import cycle.
"""

from typing import Any

from verl.workers.config.actor import ActorConfig, CheckpointConfig, FSDPActorConfig, PolicyLossConfig
from verl.workers.config.critic import CriticConfig, FSDPCriticConfig
from verl.workers.config.engine import FSDPEngineConfig
from verl.workers.config.megatron import (
    McoreActorConfig,
    McoreCriticConfig,
    McoreEngineConfig,
    McoreOptimizerConfig,
)
from verl.workers.config.model import BUILTIN_TINY_MODEL, HFModelConfig
from verl.workers.config.optimizer import FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.reward import (
    CustomRewardFunctionConfig,
    RewardConfig,
    RewardModelConfig,
    RewardModelPathConfig,
)
from verl.workers.config.reward_data_processor import RewardModelDataProcessorConfig
from verl.workers.config.rollout import (
    AgentLoopConfig,
    CheckpointEngineConfig,
    CustomAsyncServerConfig,
    MultiTurnConfig,
    RolloutConfig,
    SamplingConfig,
)
from verl.workers.config.torchtitan import TorchtitanEngineConfig, TorchtitanOptimizerConfig
from verl.workers.config.training_worker import TrainingWorkerConfig

__all__ = [
    "BUILTIN_TINY_MODEL",
    "ActorConfig",
    "AgentLoopConfig",
    "CheckpointConfig",
    "CheckpointEngineConfig",
    "CriticConfig",
    "CustomAsyncServerConfig",
    "CustomRewardFunctionConfig",
    "DistillationConfig",
    "DistillationLossConfig",
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "HFModelConfig",
    "McoreActorConfig",
    "McoreCriticConfig",
    "McoreEngineConfig",
    "McoreOptimizerConfig",
    "MultiTurnConfig",
    "OptimizerConfig",
    "PolicyLossConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RewardModelDataProcessorConfig",
    "RewardModelPathConfig",
    "RolloutConfig",
    "SamplingConfig",
    "TorchtitanEngineConfig",
    "TorchtitanOptimizerConfig",
    "TrainingWorkerConfig",
]

_DISTILLATION_NAMES = ("DistillationConfig", "DistillationLossConfig")


def __getattr__(name: str) -> Any:
    if name in _DISTILLATION_NAMES:
        from verl.trainer.distillation import config

        return getattr(config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
