"""FSDPEngineConfig: how an actor/critic/ref model is sharded and offloaded (``*.fsdp_config``).

verl's engine-config names (``EngineConfig``, ``EngineRouterReplayConfig``, ``QATEngineConfig``) are importable from
here too; they live in :mod:`.engine_common`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import ConfigError, check
from verl.workers.config.engine_common import (
    EngineCommonFields,
    EngineConfig,
    EngineRouterReplayConfig,
    QATEngineConfig,
)
from verl.workers.config.inert_blocks import inert_block

__all__ = [
    "MODEL_DTYPES",
    "TRAINING_STRATEGIES",
    "WRAP_POLICY_KEYS",
    "EngineConfig",
    "EngineRouterReplayConfig",
    "FSDPEngineConfig",
    "QATEngineConfig",
    "check_strategy",
]

MODEL_DTYPES = ("fp32", "bf16", "fp16", "float32", "bfloat16", "float16")
WRAP_POLICY_KEYS = ("transformer_layer_cls_to_wrap", "min_num_params")
TRAINING_STRATEGIES = ("fsdp", "fsdp2")
# Training backends of verl that this build does not include, named in the error a user gets for them.
_OTHER_BACKENDS = {
    "megatron": "verl's Megatron-LM engine",
    "torchtitan": "verl's TorchTitan engine",
    "veomni": "verl's VeOmni engine",
    "automodel": "verl's AutoModel engine",
    "turbofsdp": "verl's TurboFSDP engine",
}


def check_strategy(key: str, value: str) -> None:
    """Refuse a training backend other than FSDP/FSDP2, naming the backend that was asked for."""
    if value in TRAINING_STRATEGIES:
        return
    backend = _OTHER_BACKENDS.get(str(value).lower())
    what = (
        f"{value!r} selects {backend}, which this build does not include"
        if backend
        else (f"{value!r} is not a training backend")
    )
    raise ConfigError(f"{what}; use fsdp or fsdp2 (FSDP2 either way)", key=key)


@dataclass
class FSDPEngineConfig(EngineCommonFields):
    """FSDP2 knobs. ``fsdp_size=-1`` shards over the whole data-parallel group; a positive value uses hybrid
    sharding with groups of that size. ``model_dtype`` is the dtype of the parameters held by the trainer.
    ``wrap_policy`` picks the modules sharded on their own: ``transformer_layer_cls_to_wrap`` (class names, default
    the model's ``_no_split_modules``) with at least ``min_num_params`` parameters; the root takes the rest.
    ``forward_prefetch`` has each sharded layer start the next layer's all-gather before its own forward.

    The fields after ``model_dtype`` are verl's engine keys that have no effect here (``inert_keys.py`` says why for
    each); ``strategy`` is checked so that a Megatron or other backend is refused by name. The batch keys every
    engine config carries (:class:`EngineCommonFields`: ``use_dynamic_bsz``, ``*micro_batch_size_per_gpu``, ...)
    act in :class:`~verl.workers.engine_workers.TrainingWorker`; the PPO workers take them from the actor, critic
    and ref groups instead."""

    wrap_policy: dict[str, Any] = field(default_factory=lambda: {"min_num_params": 0})
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str = "fp32"
    use_orig_params: bool = False
    seed: int = 42
    full_determinism: bool = False
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    use_no_sync_for_gradient_accumulation: bool = False
    pad_to_length: bool = False
    pad_to_length_bucket: int = 1024
    forward_only: bool = False
    strategy: str = "fsdp"
    dtype: str = "bfloat16"
    qat: dict[str, Any] = field(default_factory=lambda: inert_block("qat"))
    turbo_config: dict[str, Any] = field(default_factory=lambda: inert_block("turbo_config"))
    mixed_precision: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = sorted(set(self.wrap_policy) - set(WRAP_POLICY_KEYS))
        check(not unknown, "wrap_policy", f"unknown key(s) {unknown}; allowed: {list(WRAP_POLICY_KEYS)}")
        min_params = self.wrap_policy.get("min_num_params") or 0
        check(
            isinstance(min_params, int) and min_params >= 0,
            "wrap_policy.min_num_params",
            f"must be an integer >= 0, got {min_params!r}",
        )
        names = self.wrap_policy.get("transformer_layer_cls_to_wrap")
        names = [names] if isinstance(names, str) else names
        check(
            names is None or all(isinstance(n, str) for n in names),
            "wrap_policy.transformer_layer_cls_to_wrap",
            f"must be a list of class names, got {names!r}",
        )
        check(self.fsdp_size == -1 or self.fsdp_size >= 1, "fsdp_size", f"must be -1 or >= 1, got {self.fsdp_size}")
        check(
            self.model_dtype in MODEL_DTYPES,
            "model_dtype",
            f"must be one of {list(MODEL_DTYPES)}, got {self.model_dtype!r}",
        )
        check_strategy("strategy", self.strategy)
