"""CriticConfig / FSDPCriticConfig (group ``critic``): the value model used by GAE-style estimators.

``enable=None`` means "decide from the algorithm": the trainer turns the critic on exactly when
``algorithm.adv_estimator == "gae"`` (see :meth:`CriticConfig.is_enabled`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verl.base_config import BaseConfig, check
from verl.workers.config.actor import CheckpointConfig, check_loss_agg_mode
from verl.workers.config.engine import FSDPEngineConfig, check_strategy
from verl.workers.config.inert_blocks import inert_block
from verl.workers.config.model import HFModelConfig
from verl.workers.config.optimizer import OptimizerConfig

__all__ = ["CriticConfig", "FSDPCriticConfig", "FSDPCriticModelCfg"]  # noqa: F822 - the last is loaded lazily


if TYPE_CHECKING:
    from verl.trainer.config.base_model import FSDPCriticModelCfg
else:  # a checker sees the import above, so that a misspelt name imported from here stays an error

    def __getattr__(name: str) -> Any:
        # verl's critic model block builds on the trainer's BaseModelConfig, which this package cannot import up
        # front (verl.trainer.config imports it): loaded on first use.
        if name == "FSDPCriticModelCfg":
            from verl.trainer.config.base_model import FSDPCriticModelCfg

            return FSDPCriticModelCfg
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def critic_enabled(enable: bool | None, adv_estimator: Any) -> bool:
    """The one rule for whether a critic trains: ``critic.enable`` when set, otherwise only for the GAE estimator
    (``adv_estimator`` may be a string or verl's ``AdvantageEstimator`` enum)."""
    if enable is not None:
        return bool(enable)
    return str(getattr(adv_estimator, "value", adv_estimator)) == "gae"


@dataclass
class CriticConfig(BaseConfig):
    """Value-model training knobs; batch-size units are those of :class:`ActorConfig`.

    ``forward_micro_batch_size`` is verl's deprecated size over all processes; composing the config turns it into
    ``forward_micro_batch_size_per_gpu``. ``loss_scale_factor``, ``profiler`` and ``ppo_infer_*`` have no effect
    here; ``engine`` is the backend block (``fsdp_config``), as verl's workers read it."""

    _mutable_fields = frozenset(
        {
            "ppo_mini_batch_size",
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "forward_micro_batch_size_per_gpu",
            "ppo_infer_micro_batch_size_per_gpu",
            "engine",
        }
    )

    enable: bool | None = None
    strategy: str = "fsdp"
    rollout_n: int = 1
    model: HFModelConfig = field(default_factory=HFModelConfig)
    optim: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=1e-5))
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int | None = 8
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    forward_micro_batch_size_per_gpu: int | None = 16
    forward_max_token_len_per_gpu: int = 32768
    ppo_epochs: int = 1
    shuffle: bool = False
    data_loader_seed: int | None = 42
    cliprange_value: float = 0.5
    loss_agg_mode: str = "token-mean"
    grad_clip: float = 1.0
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    forward_micro_batch_size: int | None = None
    loss_scale_factor: float | None = None
    profiler: dict[str, Any] = field(default_factory=lambda: inert_block("profiler"))
    ppo_infer_micro_batch_size_per_gpu: int | None = None
    ppo_infer_max_token_len_per_gpu: int = 32768

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", None)  # the backend block, set by each subclass (see ActorConfig)
        check(bool(self.strategy), "strategy", "must not be empty")
        check(self.rollout_n >= 1, "rollout_n", f"must be >= 1, got {self.rollout_n}")
        check(self.ppo_mini_batch_size >= 1, "ppo_mini_batch_size", f"must be >= 1, got {self.ppo_mini_batch_size}")
        check(
            self.ppo_micro_batch_size is None or self.ppo_micro_batch_size_per_gpu is None,
            "ppo_micro_batch_size",
            "set only one of ppo_micro_batch_size (deprecated) and ppo_micro_batch_size_per_gpu",
        )
        for key in (
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "forward_micro_batch_size_per_gpu",
            "forward_micro_batch_size",
            "ppo_infer_micro_batch_size_per_gpu",
        ):
            value = getattr(self, key)
            check(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        check(
            self.ppo_infer_max_token_len_per_gpu >= 1,
            "ppo_infer_max_token_len_per_gpu",
            f"must be >= 1, got {self.ppo_infer_max_token_len_per_gpu}",
        )
        check(self.ppo_epochs >= 1, "ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        check(self.cliprange_value > 0, "cliprange_value", f"must be > 0, got {self.cliprange_value}")
        check_loss_agg_mode("loss_agg_mode", self.loss_agg_mode)
        check(self.grad_clip > 0, "grad_clip", f"must be > 0, got {self.grad_clip}")

    def is_enabled(self, adv_estimator: str) -> bool:
        """Whether the critic runs: ``enable`` when set, otherwise only for the GAE estimator."""
        return critic_enabled(self.enable, adv_estimator)

    def mini_batch_samples(self) -> int:
        return self.ppo_mini_batch_size * self.rollout_n

    def micro_batch_size_per_gpu(self, world_size: int) -> int | None:
        if self.ppo_micro_batch_size is not None:
            return max(1, self.ppo_micro_batch_size // world_size)
        return self.ppo_micro_batch_size_per_gpu


@dataclass
class FSDPCriticConfig(CriticConfig):
    """CriticConfig for the FSDP/FSDP2 backend. ``fsdp`` (verl 0.9.1's name of ``fsdp_config``, whose YAML key is
    translated) and ``engine`` read ``fsdp_config``."""

    fsdp_config: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)
    ulysses_sequence_parallel_size: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_strategy("strategy", self.strategy)
        object.__setattr__(self, "engine", self.fsdp_config)
        check(
            self.ulysses_sequence_parallel_size >= 1,
            "ulysses_sequence_parallel_size",
            f"must be >= 1, got {self.ulysses_sequence_parallel_size}",
        )

    @property
    def fsdp(self) -> FSDPEngineConfig:
        return self.fsdp_config
