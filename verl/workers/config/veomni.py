"""verl's VeOmni configs: ``VeOmniEngineConfig``, ``VeOmniOptimizerConfig``, ``VeOmniActorConfig`` and
``VeOmniCriticConfig``.

A recipe can build, read and pass them with verl's keys and defaults; no engine here trains with them.
``strategy`` is ``veomni``, which the trainer refuses by name (``actor.strategy``), and the engine registry
(:class:`verl.workers.engine.EngineRegistry`) has no such backend (this package trains with FSDP2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from verl.base_config import check
from verl.workers.config.actor import ActorConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.engine_common import EngineCommonFields
from verl.workers.config.optimizer import OptimizerConfig

__all__ = ["VeOmniActorConfig", "VeOmniCriticConfig", "VeOmniEngineConfig", "VeOmniOptimizerConfig"]


@dataclass
class VeOmniEngineConfig(EngineCommonFields):
    """VeOmni's sharding (``fsdp_size``, full shard, FSDP1 offload), Ulysses and expert parallel sizes, model
    initialisation device, kernel choices (``*_implementation``), activation offload and static-length padding."""

    _mutable_fields = EngineCommonFields._mutable_fields | {"attn_implementation"}

    forward_prefetch: bool = False
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    strategy: str = "veomni"
    fsdp_size: int = -1
    ulysses_parallel_size: int = 1
    expert_parallel_size: int = 1
    mixed_precision: bool = False
    init_device: str = "meta"
    enable_full_shard: bool = False
    ckpt_manager: Literal["dcp"] = "dcp"
    load_checkpoint_path: str | None = None
    enable_fsdp_offload: bool = False
    enable_reentrant: bool = False
    attn_implementation: str = "flash_attention_2"
    moe_implementation: str = "fused"
    cross_entropy_loss_implementation: str = "eager"
    rms_norm_implementation: str = "eager"
    swiglu_mlp_implementation: str = "eager"
    rotary_pos_emb_implementation: str = "eager"
    load_balancing_loss_implementation: str = "eager"
    rms_norm_gated_implementation: str = "eager"
    causal_conv1d_implementation: str = "eager"
    chunk_gated_delta_rule_implementation: str = "eager"
    dsa_indexer_implementation: str = "eager"
    dsa_attention_implementation: str = "eager"
    mhc_implementation: str = "eager"
    qat_implementation: str = "none"
    force_use_huggingface: bool = False
    enable_async_activation_offload: bool = False
    activation_offload_modules: list[str] = field(default_factory=list)
    activation_offload_host_cache_limit_gb: float = 4.0
    basic_modules: list[str] | None = field(default_factory=list)
    pad_to_length: bool = False
    pad_to_length_bucket: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.strategy == "veomni", "strategy", f"must be 'veomni' for a VeOmni config, got {self.strategy!r}")
        limit = self.activation_offload_host_cache_limit_gb
        check(
            math.isfinite(limit) and limit >= 0,
            "activation_offload_host_cache_limit_gb",
            f"must be a finite number >= 0, got {limit}",
        )


@dataclass
class VeOmniOptimizerConfig(OptimizerConfig):
    """VeOmni's optimizer keys on top of :class:`OptimizerConfig`: ``optimizer`` (default adamw) and the schedule's
    ``lr_min``, ``lr_start`` and ``lr_decay_ratio``."""

    optimizer: str = "adamw"
    lr_min: float = 0.0
    lr_start: float = 0.0
    lr_decay_ratio: float = 1.0


def _as_engine(value: Any) -> VeOmniEngineConfig:
    return value if isinstance(value, VeOmniEngineConfig) else VeOmniEngineConfig(**dict(value or {}))


@dataclass
class VeOmniActorConfig(ActorConfig):
    """The policy's training knobs (:class:`ActorConfig`) with a VeOmni engine block (``veomni``); ``engine`` names
    the same block, as in verl."""

    strategy: str = "veomni"
    veomni: VeOmniEngineConfig = field(default_factory=VeOmniEngineConfig)
    pad_to_length: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.strategy == "veomni", "strategy", f"must be 'veomni' for a VeOmni actor, got {self.strategy!r}")
        object.__setattr__(self, "veomni", _as_engine(self.veomni))
        object.__setattr__(self, "engine", self.veomni)


@dataclass
class VeOmniCriticConfig(CriticConfig):
    """The value model's training knobs (:class:`CriticConfig`) with a VeOmni engine block (``veomni``)."""

    strategy: str = "veomni"
    veomni: VeOmniEngineConfig = field(default_factory=VeOmniEngineConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.strategy == "veomni", "strategy", f"must be 'veomni' for a VeOmni critic, got {self.strategy!r}")
        object.__setattr__(self, "veomni", _as_engine(self.veomni))
        object.__setattr__(self, "engine", self.veomni)
