"""Trainer config: typed groups, the packaged YAML (ppo_trainer.yaml + one file per group), legacy translation
and the batch plan. See docs/config.md."""

from verl.trainer.config.algo_config import (
    AlgoConfig,
    FilterGroupsConfig,
    KLControlConfig,
    PFPPOConfig,
    RolloutCorrectionConfig,
)
from verl.trainer.config.async_config import AsyncTrainingConfig
from verl.trainer.config.base_model import BaseModelConfig
from verl.trainer.config.batch_plan import compute_batch_plan, format_batch_plan
from verl.trainer.config.compose import compose_ppo_config, default_ppo_config
from verl.trainer.config.config import HybridRolloutSwitchConfig, ModuleConfig, ProfileConfig
from verl.trainer.config.data_config import CustomClsConfig, DataConfig, SamplerConfig
from verl.trainer.config.legacy import translate_legacy_config, translate_legacy_overrides
from verl.trainer.config.ppo_config import GROUPS, PPOConfig, build_ppo_config
from verl.trainer.config.resolve import as_ppo_config, to_ppo_config
from verl.trainer.config.trainer_config import TrainerConfig
from verl.workers.config.actor import CheckpointConfig  # verl 0.9.1 exports it from here

__all__ = [
    "GROUPS",
    "AlgoConfig",
    "AsyncTrainingConfig",
    "BaseModelConfig",
    "CheckpointConfig",
    "CustomClsConfig",
    "DataConfig",
    "FilterGroupsConfig",
    "HybridRolloutSwitchConfig",
    "KLControlConfig",
    "ModuleConfig",
    "PFPPOConfig",
    "PPOConfig",
    "ProfileConfig",
    "RolloutCorrectionConfig",
    "SamplerConfig",
    "TrainerConfig",
    "as_ppo_config",
    "build_ppo_config",
    "compose_ppo_config",
    "compute_batch_plan",
    "default_ppo_config",
    "format_batch_plan",
    "to_ppo_config",
    "translate_legacy_config",
    "translate_legacy_overrides",
]
