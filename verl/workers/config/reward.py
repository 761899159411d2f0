"""RewardConfig (group ``reward``): rule-based reward managers, custom scoring functions and reward models.

verl's top-level keys map here (``verl.trainer.config.key_rules``): ``reward_model.reward_manager`` /
``reward_kwargs`` / ``num_workers`` / ``launch_reward_fn_async`` -> ``reward.*``; every other ``reward_model.X`` ->
``reward.reward_model.X``; ``custom_reward_function.X`` -> ``reward.custom_reward_function.X``; ``sandbox_fusion.X``
-> ``reward.sandbox_fusion.X``. verl 0.9.1's ``reward.reward_manager.name`` is ``reward.reward_manager`` here and
its ``reward.reward_model.model_path`` is ``reward.reward_model.model.path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.workers.config.inert_blocks import inert_block

__all__ = [
    "CustomRewardFunctionConfig",
    "ModuleConfig",
    "RewardConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardModelPathConfig",
    "SandboxFusionConfig",
]


@dataclass
class ModuleConfig(BaseConfig):
    """A Python file (``path``) or importable module (``name``) to load code from."""

    path: str | None = None
    name: str | None = None


@dataclass
class RewardManagerConfig(BaseConfig):
    """verl 0.9.1's ``reward.reward_manager`` block: ``source`` ``register`` picks a registered manager by ``name``;
    ``importlib`` loads class ``name`` from ``module``. Here ``reward.reward_manager`` is the registered name itself
    (the block's ``name`` is translated to it) and managers are never imported by path (``importlib`` is refused)."""

    source: str = "register"
    name: str = "naive"
    module: ModuleConfig | None = field(default_factory=ModuleConfig)

    def __post_init__(self) -> None:
        check(self.source in ("register", "importlib"), "source", f"must be register or importlib, got {self.source!r}")


@dataclass
class SandboxFusionConfig(BaseConfig):
    """verl's code-execution sandbox (``reward.sandbox_fusion``): its ``url``, concurrent requests and memory
    limit per process. No built-in scorer here calls it."""

    url: str | None = None
    max_concurrent: int = 64
    memory_limit_mb: int = 1024


@dataclass
class CustomRewardFunctionConfig(BaseConfig):
    """A user scoring function: ``path`` to a .py file, ``name`` of the function in it (null: ``compute_score``)."""

    path: str | None = None
    name: str | None = "compute_score"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is None:  # verl's top-level custom_reward_function.name defaults to null
            object.__setattr__(self, "name", "compute_score")
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
    """A model-based reward (off by default), scored by the reward-model worker: in the trainer's resource pool, or
    with ``enable_resource_pool`` in a ``reward_pool`` of ``nnodes`` x ``n_gpus_per_node`` processes of its own.

    ``micro_batch_size`` is verl's deprecated size over all processes (composing the config turns it into
    ``micro_batch_size_per_gpu``). verl 0.9.1's ``rollout`` (a rollout engine serving the reward model) has no
    effect here. ``model_path`` (verl 0.9.1's name of ``model.path``, whose YAML key is translated) reads
    ``model.path``."""

    enable: bool = False
    strategy: str = "fsdp"
    model: RewardModelPathConfig = field(default_factory=RewardModelPathConfig)
    micro_batch_size_per_gpu: int | None = None
    max_length: int | None = None
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = 32768
    micro_batch_size: int | None = None
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 0
    rollout: dict[str, Any] = field(default_factory=lambda: inert_block("reward_rollout"))

    @property
    def model_path(self) -> str | None:
        return self.model.path

    def __post_init__(self) -> None:
        check(
            not self.enable or bool(self.model.path),
            "model.path",
            "must be set when the reward model is enabled (enable=true)",
        )
        value = self.micro_batch_size_per_gpu
        check(value is None or value >= 1, "micro_batch_size_per_gpu", f"must be >= 1 or null, got {value}")


@dataclass
class RewardConfig(BaseConfig):
    """How samples are scored. ``reward_manager`` names a registered manager (naive, batch, dapo, ...).
    ``sandbox_fusion`` (verl's code-execution sandbox for code data sets) has no effect here."""

    reward_manager: str = "naive"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    launch_reward_fn_async: bool = False
    num_workers: int = 1
    timeout_s: float = 300.0
    sandbox_fusion: dict[str, Any] = field(
        default_factory=lambda: {"url": None, "max_concurrent": 64, "memory_limit_mb": 1024}
    )

    def __post_init__(self) -> None:
        check(bool(self.reward_manager), "reward_manager", "must name a registered reward manager")
        check(self.num_workers >= 0, "num_workers", f"must be >= 0 (0: score in process), got {self.num_workers}")
        check(self.timeout_s > 0, "timeout_s", f"must be > 0, got {self.timeout_s}")
