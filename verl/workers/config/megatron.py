"""verl's Megatron-LM (mcore) configs: ``McoreEngineConfig``, ``McoreOptimizerConfig``, ``McoreActorConfig``,
``McoreCriticConfig``.

They exist so that a recipe which builds, reads or passes these configs keeps working: each takes verl's keys with
verl's defaults and validates them. No engine here trains with them: ``strategy`` is ``megatron``, and asking the
engine registry (:class:`verl.workers.engine.EngineRegistry`) for that backend raises ``MissingExtraError``, naming
the backend. The knobs every engine config shares are :class:`~verl.workers.config.engine_common.EngineCommonFields`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from verl.base_config import check
from verl.workers.config.actor import ActorConfig
from verl.workers.config.checkpoint import McoreCheckpointConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.engine_common import EngineCommonFields
from verl.workers.config.optimizer import OptimizerConfig

__all__ = ["McoreActorConfig", "McoreCriticConfig", "McoreEngineConfig", "McoreOptimizerConfig"]

_MCORE_DTYPES = ("bfloat16", "float16")
_MCORE_STATE_DTYPES = ("fp32", "float32", "32", "bf16", "bfloat16")


@dataclass
class McoreEngineConfig(EngineCommonFields):
    """Megatron parallelism (tensor / pipeline / context / expert sizes), distributed optimizer and checkpointing.

    With ``tensor_model_parallel_size == 1`` sequence parallelism has nothing to split, so it is turned off (with a
    warning), as verl does.
    """

    _mutable_fields = EngineCommonFields._mutable_fields | {"sequence_parallel"}

    tensor_model_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    context_parallel_size: int = 1
    dynamic_context_parallel: bool = False
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    max_seqlen_per_dp_cp_rank: int | None = None
    sequence_parallel: bool = True
    use_distributed_optimizer: bool = True
    pad_bshd_to_minibatch_max: bool = True
    pad_to_length: bool = False
    pad_to_length_bucket: int = 512
    use_dist_checkpointing: bool = False
    dist_checkpointing_path: str | None = None
    dist_checkpointing_prefix: str = ""
    dist_ckpt_optim_fully_reshardable: bool = False
    distrib_optim_fully_reshardable_mem_efficient: bool = False
    override_ddp_config: dict[str, Any] = field(default_factory=dict)
    override_transformer_config: dict[str, Any] = field(default_factory=dict)
    override_mcore_model_config: dict[str, Any] = field(default_factory=dict)
    use_mbridge: bool = True
    vanilla_mbridge: bool = False
    use_megatron_fsdp: bool = False
    strategy: str = "megatron"
    qat: dict[str, Any] = field(default_factory=lambda: {"enable": False})

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "megatron", "strategy", f"must be 'megatron' for a Megatron config, got {self.strategy!r}"
        )
        check(self.dtype in _MCORE_DTYPES, "dtype", f"must be one of {list(_MCORE_DTYPES)}, got {self.dtype!r}")
        for key in (
            "tensor_model_parallel_size",
            "expert_model_parallel_size",
            "pipeline_model_parallel_size",
            "context_parallel_size",
        ):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        if self.dynamic_context_parallel:
            size = self.max_seqlen_per_dp_cp_rank
            check(
                isinstance(size, int) and not isinstance(size, bool) and size > 0,
                "max_seqlen_per_dp_cp_rank",
                f"must be a positive integer with dynamic_context_parallel=true, got {size!r}",
            )
        if self.tensor_model_parallel_size == 1 and self.sequence_parallel:
            warnings.warn(
                "McoreEngineConfig: tensor_model_parallel_size=1, so sequence_parallel is set to false", stacklevel=2
            )
            self.sequence_parallel = False


@dataclass
class McoreOptimizerConfig(OptimizerConfig):
    """Megatron's optimizer and schedule keys (``lr_decay_style``, ``min_lr``, Muon options, precision-aware state
    dtypes) on top of :class:`OptimizerConfig`. ``optimizer`` names a Megatron optimizer (default ``adam``)."""

    optimizer: str = "adam"
    lr_warmup_init: float = 0.0
    lr_decay_steps: int | None = None
    lr_decay_style: str = "linear"
    min_lr: float = 0.0
    weight_decay_incr_style: str = "constant"
    lr_wsd_decay_style: str = "exponential"
    lr_wsd_decay_steps: int | None = None
    use_checkpoint_opt_param_scheduler: bool = False
    use_precision_aware_optimizer: bool = False
    main_grads_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    use_layer_wise_distributed_optimizer: bool = False
    use_layer_wise_param_layout: bool | None = None
    muon_momentum: float = 0.95
    muon_nesterov: bool = False
    muon_split_qkv: bool = True
    muon_scale_mode: str = "spectral"
    muon_coefficient_type: str = "quintic"
    muon_num_ns_steps: int = 5
    muon_tp_mode: str = "blockwise"
    muon_fp32_matmul_prec: str = "medium"
    muon_extra_scale_factor: float = 1.0
    muon_scalar_optimizer: str = "adam"
    muon_match_adamw_update_rms: bool = False

    def __post_init__(self) -> None:
        for key in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            value = str(getattr(self, key))
            check(value in _MCORE_STATE_DTYPES, key, f"must be one of {list(_MCORE_STATE_DTYPES)}, got {value!r}")
        super().__post_init__()


def _as_engine(value: Any) -> McoreEngineConfig:
    return value if isinstance(value, McoreEngineConfig) else McoreEngineConfig(**dict(value or {}))


@dataclass
class McoreActorConfig(ActorConfig):
    """The policy's training knobs (:class:`ActorConfig`) with a Megatron engine block (``megatron``); ``engine``
    names the same block, as in verl."""

    strategy: str = "megatron"
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    megatron: McoreEngineConfig = field(default_factory=McoreEngineConfig)
    profile: dict[str, Any] = field(default_factory=dict)
    checkpoint: McoreCheckpointConfig = field(default_factory=McoreCheckpointConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "megatron", "strategy", f"must be 'megatron' for a Megatron actor, got {self.strategy!r}"
        )
        object.__setattr__(self, "megatron", _as_engine(self.megatron))
        object.__setattr__(self, "engine", self.megatron)


@dataclass
class McoreCriticConfig(CriticConfig):
    """The value model's training knobs (:class:`CriticConfig`) with a Megatron engine block (``megatron``)."""

    strategy: str = "megatron"
    nccl_timeout: int = 600
    megatron: McoreEngineConfig = field(default_factory=McoreEngineConfig)
    checkpoint: McoreCheckpointConfig = field(default_factory=McoreCheckpointConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "megatron", "strategy", f"must be 'megatron' for a Megatron critic, got {self.strategy!r}"
        )
        check(self.nccl_timeout > 0, "nccl_timeout", f"must be > 0 seconds, got {self.nccl_timeout}")
        object.__setattr__(self, "megatron", _as_engine(self.megatron))
        object.__setattr__(self, "engine", self.megatron)
