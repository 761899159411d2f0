"""Typed worker configs (frozen dataclasses with ``_target_``); see docs/config.md.

verl's Megatron, TorchTitan, VeOmni and AutoModel configs (:mod:`.megatron`, :mod:`.torchtitan`, :mod:`.veomni`,
:mod:`.automodel`) are here for recipes that build them; no engine of this package trains with them. verl's critic
model block ``FSDPCriticModelCfg`` (built on the trainer's ``BaseModelConfig``) is loaded on first use, which keeps
this package free of an import cycle.
"""

from typing import TYPE_CHECKING, Any

from verl.workers.config.actor import (
    ActorConfig,
    CheckpointConfig,
    FSDPActorConfig,
    PolicyLossConfig,
    RouterReplayConfig,
)
from verl.workers.config.automodel import AutomodelEngineConfig, AutomodelOptimizerConfig
from verl.workers.config.checkpoint import McoreCheckpointConfig
from verl.workers.config.critic import CriticConfig, FSDPCriticConfig
from verl.workers.config.disaggregation import DisaggregationConfig
from verl.workers.config.distillation import DistillationConfig, DistillationLossConfig, DistillationTeacherModelConfig
from verl.workers.config.engine import EngineConfig, EngineRouterReplayConfig, FSDPEngineConfig, QATEngineConfig
from verl.workers.config.megatron import (
    McoreActorConfig,
    McoreCriticConfig,
    McoreEngineConfig,
    McoreOptimizerConfig,
)
from verl.workers.config.model import BUILTIN_TINY_MODEL, HFModelConfig, MtpConfig
from verl.workers.config.optimizer import FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.reward import (
    CustomRewardFunctionConfig,
    ModuleConfig,
    RewardConfig,
    RewardManagerConfig,
    RewardModelConfig,
    RewardModelPathConfig,
    SandboxFusionConfig,
)
from verl.workers.config.reward_data_processor import RewardModelDataProcessorConfig
from verl.workers.config.rollout import (
    AgentLoopConfig,
    CheckpointEngineConfig,
    CustomAsyncServerConfig,
    MultiTurnConfig,
    PrometheusConfig,
    RolloutConfig,
    SamplingConfig,
    ServerConfig,
    TraceConfig,
)
from verl.workers.config.torchtitan import (
    TorchTitanActorConfig,
    TorchTitanCriticConfig,
    TorchtitanEngineConfig,
    TorchtitanOptimizerConfig,
)
from verl.workers.config.training_worker import TrainingWorkerConfig
from verl.workers.config.veomni import (
    VeOmniActorConfig,
    VeOmniCriticConfig,
    VeOmniEngineConfig,
    VeOmniOptimizerConfig,
)

__all__ = [
    "BUILTIN_TINY_MODEL",
    "ActorConfig",
    "AgentLoopConfig",
    "AutomodelEngineConfig",
    "AutomodelOptimizerConfig",
    "CheckpointConfig",
    "CheckpointEngineConfig",
    "CriticConfig",
    "CustomAsyncServerConfig",
    "CustomRewardFunctionConfig",
    "DisaggregationConfig",
    "DistillationConfig",
    "DistillationLossConfig",
    "DistillationTeacherModelConfig",
    "EngineConfig",
    "EngineRouterReplayConfig",
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPCriticModelCfg",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "HFModelConfig",
    "McoreActorConfig",
    "McoreCheckpointConfig",
    "McoreCriticConfig",
    "McoreEngineConfig",
    "McoreOptimizerConfig",
    "ModuleConfig",
    "MtpConfig",
    "MultiTurnConfig",
    "OptimizerConfig",
    "PolicyLossConfig",
    "PrometheusConfig",
    "QATEngineConfig",
    "RewardConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardModelDataProcessorConfig",
    "RewardModelPathConfig",
    "RolloutConfig",
    "RouterReplayConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
    "ServerConfig",
    "TorchTitanActorConfig",
    "TorchTitanCriticConfig",
    "TorchtitanEngineConfig",
    "TorchtitanOptimizerConfig",
    "TraceConfig",
    "TrainingWorkerConfig",
    "VeOmniActorConfig",
    "VeOmniCriticConfig",
    "VeOmniEngineConfig",
    "VeOmniOptimizerConfig",
]


if TYPE_CHECKING:
    from verl.trainer.config.base_model import FSDPCriticModelCfg
else:  # a checker sees the import above, so that a misspelt name imported from here stays an error

    def __getattr__(name: str) -> Any:
        if name == "FSDPCriticModelCfg":
            from verl.trainer.config.base_model import FSDPCriticModelCfg

            return FSDPCriticModelCfg
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
