"""RewardConfig (group ``reward``): rule-based reward managers, custom scoring functions and reward models.

Legacy keys map here: ``reward_model.reward_manager`` / ``reward_model.reward_kwargs`` /
``reward_model.launch_reward_fn_async`` -> ``reward.*``; every other ``reward_model.X`` -> ``reward.reward_model.X``;
``custom_reward_function.X`` -> ``reward.custom_reward_function.X``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["CustomRewardFunctionConfig", "RewardConfig", "RewardModelConfig", "RewardModelPathConfig"]


@dataclass
class CustomRewardFunctionConfig(BaseConfig):
    """A user scoring function: ``path`` to a .py file, ``name`` of the function in it."""

    path: str | None = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(bool(self.name), "name", "must name the scoring function inside path")


@dataclass
class RewardModelPathConfig(BaseConfig):
    """The reward model checkpoint (``reward.reward_model.model``)."""

    path: str | None = None
    input_tokenizer: str | None = None
    trust_remote_code: bool = False
    external_lib: str | None = None


@dataclass
class RewardModelConfig(BaseConfig):
    """A model-based reward (off by default)."""

    enable: bool = False
    strategy: str = "fsdp"
    model: RewardModelPathConfig = field(default_factory=RewardModelPathConfig)
    micro_batch_size_per_gpu: int | None = None
    max_length: int | None = None
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = 32768

    def __post_init__(self) -> None:
        check(not self.enable or bool(self.model.path), "model.path",
              "must be set when the reward model is enabled (enable=true)")
        value = self.micro_batch_size_per_gpu
        check(value is None or value >= 1, "micro_batch_size_per_gpu", f"must be >= 1 or null, got {value}")


@dataclass
class RewardConfig(BaseConfig):
    """How samples are scored. ``reward_manager`` names a registered manager (naive, batch, dapo, ...)."""

    reward_manager: str = "naive"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    launch_reward_fn_async: bool = False
    num_workers: int = 1
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        check(bool(self.reward_manager), "reward_manager", "must name a registered reward manager")
        check(self.num_workers >= 0, "num_workers", f"must be >= 0 (0: score in process), got {self.num_workers}")
        check(self.timeout_s > 0, "timeout_s", f"must be > 0, got {self.timeout_s}")
