"""The keys every verl engine config carries, whatever its backend (batching, offload, dtype, seed, router replay).

Every engine config here builds on them: this package's :class:`~verl.workers.config.engine.FSDPEngineConfig` and
verl's Megatron, TorchTitan, VeOmni and AutoModel configs. ``EngineConfig`` is verl's name for the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = [
    "ROUTER_REPLAY_MODES",
    "EngineCommonFields",
    "EngineConfig",
    "EngineRouterReplayConfig",
    "QATEngineConfig",
    "RouterReplayConfig",
]

ROUTER_REPLAY_MODES = ("disabled", "R2", "R3")


@dataclass
class EngineRouterReplayConfig(BaseConfig):
    """MoE router replay: ``mode`` is ``disabled``, ``R2`` (replay the routing recorded in training) or ``R3`` (replay
    the rollout's routing); the files hold recorded routing decisions. No engine here records or replays routing."""

    mode: str = "disabled"
    record_file: str | None = None
    replay_file: str | None = None

    def __post_init__(self) -> None:
        check(
            self.mode in ROUTER_REPLAY_MODES, "mode", f"must be one of {list(ROUTER_REPLAY_MODES)}, got {self.mode!r}"
        )


@dataclass
class RouterReplayConfig(EngineRouterReplayConfig):
    """verl's older name of :class:`EngineRouterReplayConfig` (its actor module exports it)."""


@dataclass
class QATEngineConfig(BaseConfig):
    """Quantization-aware training inside an engine (``mode`` w4a16 or w4a4, blockwise ``group_size``); the engines
    here do not implement it, so ``*.fsdp_config.qat`` and the engines' ``qat`` blocks have no effect."""

    enable: bool = False
    mode: str = "w4a16"
    group_size: int = 16
    ignore_patterns: list[str] = field(default_factory=lambda: ["lm_head", "embed_tokens", "re:.*mlp.gate$"])
    activation_observer: str = "static_minmax"
    quantization_config_path: str | None = None


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


EngineConfig = EngineCommonFields  # verl's name
