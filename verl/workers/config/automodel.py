"""verl's AutoModel (NeMo Automodel) configs: ``AutomodelEngineConfig`` and ``AutomodelOptimizerConfig``.

A recipe can build, read and pass them with verl's keys and defaults; no engine here trains with them.
``strategy`` is ``automodel``, which the trainer refuses by name, and the engine registry
(:class:`verl.workers.engine.EngineRegistry`) has no such backend (this package trains with FSDP2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import check
from verl.workers.config.engine_common import EngineCommonFields
from verl.workers.config.optimizer import OptimizerConfig

__all__ = ["AutomodelEngineConfig", "AutomodelOptimizerConfig"]

_DISTRIBUTED_STRATEGIES = ("fsdp2", "megatron_fsdp", "ddp")


@dataclass
class AutomodelEngineConfig(EngineCommonFields):
    """AutoModel's distributed strategy (``fsdp2``, ``megatron_fsdp``, ``ddp``) and parallel sizes, model loading
    and kernel settings, its ``backend_config`` / ``moe_config`` keyword blocks and FSDP2 mixed-precision dtypes."""

    strategy: str = "automodel"
    distributed_strategy: str = "fsdp2"
    tp_size: int = 1
    pp_size: int = 1
    cp_size: int = 1
    ep_size: int = 1
    dp_replicate_size: int = 1
    sequence_parallel: bool = False
    defer_fsdp_grad_sync: bool = True
    activation_checkpointing: bool = False
    enable_fp8: bool = False
    enable_compile: bool = False
    model_dtype: str = "fp32"
    attn_implementation: str = "flash_attention_2"
    backend_config: dict[str, Any] = field(default_factory=dict)
    moe_config: dict[str, Any] = field(default_factory=dict)
    mp_param_dtype: str = "bf16"
    mp_reduce_dtype: str = "fp32"
    mp_output_dtype: str = "bf16"
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.strategy == "automodel",
            "strategy",
            f"must be 'automodel' for an AutoModel config, got {self.strategy!r}",
        )
        check(
            self.distributed_strategy in _DISTRIBUTED_STRATEGIES,
            "distributed_strategy",
            f"must be one of {list(_DISTRIBUTED_STRATEGIES)}, got {self.distributed_strategy!r}",
        )
        check(self.pp_size == 1, "pp_size", f"must be 1 (AutoModel has no pipeline parallelism), got {self.pp_size}")


@dataclass
class AutomodelOptimizerConfig(OptimizerConfig):
    """AutoModel's optimizer keys on top of :class:`OptimizerConfig` (schedule start ratio, weight-decay schedule,
    ``eps``, master weights and optimizer-state dtypes); its schedule defaults to cosine."""

    init_lr_ratio: float | None = 0.1
    min_lr_ratio: float = 0.01  # the base class checks it is in [0, 1]
    lr_scheduler_type: str = "cosine"
    wd_incr_style: str = "constant"
    eps: float = 1e-8
    master_weights: bool = False
    store_param_remainders: bool = False
    exp_avg_dtype: str | None = None
    exp_avg_sq_dtype: str | None = None
    master_weight_dtype: str | None = None
