"""verl's import path for the algorithm configs (``from verl.trainer.config.algorithm import ...``); they are
defined in :mod:`verl.trainer.config.algo_config`."""

from verl.trainer.config.algo_config import AlgoConfig, FilterGroupsConfig, KLControlConfig, RolloutCorrectionConfig

__all__ = ["AlgoConfig", "FilterGroupsConfig", "KLControlConfig", "RolloutCorrectionConfig"]
