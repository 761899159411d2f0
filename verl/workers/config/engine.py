"""FSDPEngineConfig: how an actor/critic/ref model is sharded and offloaded (``*.fsdp_config``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["MODEL_DTYPES", "FSDPEngineConfig"]

MODEL_DTYPES = ("fp32", "bf16", "fp16", "float32", "bfloat16", "float16")


@dataclass
class FSDPEngineConfig(BaseConfig):
    """FSDP2 knobs. ``fsdp_size=-1`` shards over the whole data-parallel group; a positive value uses hybrid
    sharding with groups of that size. ``model_dtype`` is the dtype of the parameters held by the trainer."""

    wrap_policy: dict[str, Any] = field(default_factory=lambda: {"min_num_params": 0})
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str = "fp32"

    def __post_init__(self) -> None:
        check(self.fsdp_size == -1 or self.fsdp_size >= 1, "fsdp_size", f"must be -1 or >= 1, got {self.fsdp_size}")
        check(self.model_dtype in MODEL_DTYPES, "model_dtype",
              f"must be one of {list(MODEL_DTYPES)}, got {self.model_dtype!r}")
