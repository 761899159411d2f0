"""The keys every verl engine config carries, whatever its backend (batching, offload, dtype, seed, router replay).

verl's Megatron and TorchTitan configs (:mod:`.megatron`, :mod:`.torchtitan`) build on these; this package's own
:class:`~verl.workers.config.engine.FSDPEngineConfig` keeps its historical field set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["ROUTER_REPLAY_MODES", "EngineCommonFields"]

ROUTER_REPLAY_MODES = ("disabled", "R2", "R3")


@dataclass
class EngineCommonFields(BaseConfig):
    """The keys every verl engine config carries (batching, offload, dtype, seed, MoE router replay).

    ``router_replay`` is verl's ``{mode, record_file, replay_file}`` block; ``mode`` is one of
    :data:`ROUTER_REPLAY_MODES`.
    """

    _mutable_fields = frozenset(
        {
            "use_dynamic_bsz",
            "max_token_len_per_gpu",
            "micro_batch_size_per_gpu",
            "infer_max_token_len_per_gpu",
            "infer_micro_batch_size_per_gpu",
            "use_fused_kernels",
            "use_remove_padding",
            "forward_only",
            "param_offload",
        }
    )

    param_offload: bool = False
    optimizer_offload: bool = False
    forward_only: bool = False
    strategy: str | None = None
    dtype: str = "bfloat16"
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int | None = None
    micro_batch_size_per_gpu: int | None = None
    infer_max_token_len_per_gpu: int | None = None
    infer_micro_batch_size_per_gpu: int | None = None
    use_fused_kernels: bool = False
    use_remove_padding: bool = True
    seed: int = 42
    full_determinism: bool = False
    router_replay: dict[str, Any] = field(
        default_factory=lambda: {"mode": "disabled", "record_file": None, "replay_file": None}
    )

    def __post_init__(self) -> None:
        mode = dict(self.router_replay or {}).get("mode", "disabled")
        check(
            mode in ROUTER_REPLAY_MODES,
            "router_replay.mode",
            f"must be one of {list(ROUTER_REPLAY_MODES)}, got {mode!r}",
        )
