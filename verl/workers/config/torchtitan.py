"""verl's TorchTitan configs: ``TorchtitanEngineConfig``, ``TorchtitanOptimizerConfig``, ``TorchTitanActorConfig`` and
``TorchTitanCriticConfig``.

A recipe can build, read and pass them with verl's keys and defaults; no engine here trains with them.
``strategy`` is ``torchtitan``, and asking the engine registry (:class:`verl.workers.engine.EngineRegistry`) for that
backend raises ``MissingExtraError`` naming it (this package trains Hugging Face models with FSDP2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import check
from verl.workers.config.actor import ActorConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.engine_common import EngineCommonFields
from verl.workers.config.optimizer import OptimizerConfig

__all__ = ["TorchTitanActorConfig", "TorchTitanCriticConfig", "TorchtitanEngineConfig", "TorchtitanOptimizerConfig"]

_ATTN_TYPES = ("flex", "flex_flash", "varlen")
_SPMD_BACKENDS = ("default", "full_dtensor", "spmd_types")
_ACTIVATION_CHECKPOINT = ("selective", "full", "none")
_RESHARD_POLICIES = ("default", "always", "never")


@dataclass
class TorchtitanEngineConfig(EngineCommonFields):
    """TorchTitan's parallel sizes (data replicate/shard, tensor, expert, pipeline, context), attention kernel,
    SPMD backend and activation checkpointing, plus its FSDP wrapping knobs."""

    wrap_policy: dict[str, Any] = field(default_factory=dict)
    reshard_after_forward: str = "default"
    forward_prefetch: bool = False
    use_orig_params: bool = False
    mixed_precision: bool = False
    offload_policy: bool = False
    use_torch_compile: bool = True
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    entropy_checkpointing: bool = False
    data_parallel_size: int = 1
    data_parallel_replicate_size: int = 1
    data_parallel_shard_size: int = 1
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    context_parallel_size: int = 1
    attn_type: str = "flex"
    spmd_backend: str = "spmd_types"
    activation_checkpoint: str = "selective"
    max_seq_len: int | None = None
    strategy: str = "torchtitan"

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "torchtitan",
            "strategy",
            f"must be 'torchtitan' for a TorchTitan config, got {self.strategy!r}",
        )
        for key, allowed in (
            ("attn_type", _ATTN_TYPES),
            ("spmd_backend", _SPMD_BACKENDS),
            ("activation_checkpoint", _ACTIVATION_CHECKPOINT),
            ("reshard_after_forward", _RESHARD_POLICIES),
        ):
            check(getattr(self, key) in allowed, key, f"must be one of {list(allowed)}, got {getattr(self, key)!r}")
        for key in (
            "data_parallel_size",
            "data_parallel_replicate_size",
            "data_parallel_shard_size",
            "tensor_parallel_size",
            "expert_parallel_size",
            "expert_tensor_parallel_size",
            "pipeline_parallel_size",
            "context_parallel_size",
        ):
            check(
                getattr(self, key) >= 1 or getattr(self, key) == -1,
                key,
                f"must be >= 1 (or -1: the rest of the world), got {getattr(self, key)}",
            )


@dataclass
class TorchtitanOptimizerConfig(OptimizerConfig):
    """TorchTitan's optimizer keys on top of :class:`OptimizerConfig`: ``name`` (default AdamW), ``eps``, the
    learning-rate ``decay_type`` (linear, sqrt, cosine) and ``min_lr_factor``."""

    name: str = "AdamW"
    eps: float = 1e-8
    decay_type: str = "linear"
    min_lr_factor: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.decay_type in ("linear", "sqrt", "cosine"),
            "decay_type",
            f"must be one of ['linear', 'sqrt', 'cosine'], got {self.decay_type!r}",
        )
        check(0.0 <= self.min_lr_factor <= 1.0, "min_lr_factor", f"must be in [0, 1], got {self.min_lr_factor}")
        check(self.eps > 0, "eps", f"must be > 0, got {self.eps}")


def _as_engine(value: Any) -> TorchtitanEngineConfig:
    return value if isinstance(value, TorchtitanEngineConfig) else TorchtitanEngineConfig(**dict(value or {}))


@dataclass
class TorchTitanActorConfig(ActorConfig):
    """The policy's training knobs (:class:`ActorConfig`) with a TorchTitan engine block (``torchtitan``); ``engine``
    names the same block, as in verl."""

    strategy: str = "torchtitan"
    torchtitan: TorchtitanEngineConfig = field(default_factory=TorchtitanEngineConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "torchtitan",
            "strategy",
            f"must be 'torchtitan' for a TorchTitan actor, got {self.strategy!r}",
        )
        object.__setattr__(self, "torchtitan", _as_engine(self.torchtitan))
        object.__setattr__(self, "engine", self.torchtitan)


@dataclass
class TorchTitanCriticConfig(CriticConfig):
    """The value model's training knobs (:class:`CriticConfig`) with a TorchTitan engine block (``torchtitan``)."""

    strategy: str = "torchtitan"
    torchtitan: TorchtitanEngineConfig = field(default_factory=TorchtitanEngineConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "torchtitan",
            "strategy",
            f"must be 'torchtitan' for a TorchTitan critic, got {self.strategy!r}",
        )
        object.__setattr__(self, "torchtitan", _as_engine(self.torchtitan))
        object.__setattr__(self, "engine", self.torchtitan)
