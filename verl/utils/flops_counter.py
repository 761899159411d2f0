"""Model FLOPs utilisation (MFU): the FLOP/s a training step achieved against the device's dense bf16 peak.

The count is the usual transformer estimate: 6 FLOPs per parameter per token for the matrix multiplies (forward and
backward) plus the attention scores, 6 * seqlen^2 * head_dim * heads per layer per sequence. Mixture-of-experts
layers count the router and only the experts a token is routed to (plus shared experts). Families whose layers
differ from that (multi-head latent attention, hybrid linear attention, sliding windows) are not estimated: their
MFU reads 0 rather than a wrong number.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from verl.utils.device import is_cuda_available

__all__ = ["FlopsCounter", "get_device_flops", "DENSE_MODEL_TYPES", "MOE_MODEL_TYPES"]

logger = logging.getLogger(__name__)

# Dense (no sparsity) bf16 peak FLOP/s by a fragment of the device name.
_PEAK_FLOPS: dict[str, float] = {
    "GB200": 2.5e15,
    "B200": 2.25e15,
    "H100": 989e12,
    "H800": 989e12,
    "H200": 989e12,
    "H20": 148e12,
    "A100": 312e12,
    "A800": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "A40": 149.7e12,
    "L20": 119.5e12,
    "MI300X": 1307e12,
    "MI325X": 1307e12,
    "CPU": 448e9,
}
_UNITS = {"B": 1e9, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}

# Decoder families whose layers are plain (grouped-query) attention plus a gated MLP.
DENSE_MODEL_TYPES = frozenset(
    {
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "minicpmv",
        "minicpmo",
        "seed_oss",
        "glm4v",
        "mimo",
        "phi3",
        "granite",
    }
)
# The same with mixture-of-experts MLPs.
MOE_MODEL_TYPES = frozenset({"qwen2_moe", "qwen3_moe", "qwen3_vl_moe", "mixtral", "olmoe"})


def get_device_flops(unit: str = "T", device_name: str | None = None) -> float:
    """Peak dense bf16 FLOP/s of the current device (or of ``device_name``) in ``unit`` (B, K, M, G, T, P).

    An unknown GPU gives ``inf``, so an MFU computed against it reads 0 instead of a made-up percentage.
    """
    if unit not in _UNITS:
        raise ValueError(f"get_device_flops: unit must be one of {sorted(_UNITS)}, got {unit!r}")
    if device_name is None:
        device_name = torch.cuda.get_device_name() if is_cuda_available else "CPU"
    for fragment in sorted(_PEAK_FLOPS, key=len, reverse=True):  # "H200" before "H20", "L40S" before "L40"
        if fragment in device_name:
            return _PEAK_FLOPS[fragment] / _UNITS[unit]
    return float("inf")


def _text_config(config: Any) -> Any:
    return getattr(config, "text_config", None) or config


def _first(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _mlp_params(config: Any, moe: bool) -> int:
    hidden = config.hidden_size
    if not moe:
        return 3 * hidden * config.intermediate_size
    experts = _first(config, "num_experts", "num_local_experts", "n_routed_experts")
    top_k = config.num_experts_per_tok
    expert_size = _first(config, "moe_intermediate_size", "intermediate_size")
    routed = hidden * experts + 3 * hidden * expert_size * top_k
    shared_size = _first(config, "shared_expert_intermediate_size", default=0)
    shared_count = _first(config, "n_shared_experts", "num_shared_experts", default=0)
    return routed + 3 * hidden * (shared_size + shared_count * expert_size)


def _transformer_flops(config: Any, tokens: int, seqlens: Sequence[int], moe: bool) -> float:
    """FLOPs of one forward and backward over ``seqlens`` sequences of a decoder transformer."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    kv_heads = _first(config, "num_key_value_heads", default=heads)
    head_dim = _first(config, "head_dim", default=hidden // heads)
    layers = config.num_hidden_layers
    attention_params = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, k, v and the output projection
    params = (attention_params + _mlp_params(config, moe)) * layers + 2 * config.vocab_size * hidden
    attention = 6 * sum(s * s for s in seqlens) * head_dim * heads * layers
    return 6.0 * params * tokens + attention


class FlopsCounter:
    """Estimate achieved TFLOP/s of a step from its sequence lengths and duration.

    ``FlopsCounter(hf_config).estimate_flops(batch_seqlens, delta_time)`` returns ``(achieved, peak)`` in TFLOP/s;
    MFU is their ratio. A model family without an estimate gives ``achieved == 0`` (logged once).
    """

    def __init__(self, config: Any):
        self.config = config
        model_type = getattr(config, "model_type", None)
        self._moe = model_type in MOE_MODEL_TYPES
        self._supported = model_type in DENSE_MODEL_TYPES or self._moe
        if not self._supported:
            logger.warning(
                "FlopsCounter: no FLOPs estimate for model_type=%r (estimated for %s); MFU will read 0",
                model_type,
                sorted(DENSE_MODEL_TYPES | MOE_MODEL_TYPES),
            )

    def estimate_flops(self, batch_seqlens: Sequence[int], delta_time: float, **kwargs: Any) -> tuple[float, float]:
        """``(achieved TFLOP/s, device peak TFLOP/s)`` for one step over ``batch_seqlens`` tokens in ``delta_time``
        seconds; extra keywords (verl passes image sizes for vision models) are accepted and unused."""
        seqlens = [int(s) for s in batch_seqlens]
        achieved = 0.0
        if self._supported and delta_time > 0:
            flops = _transformer_flops(_text_config(self.config), sum(seqlens), seqlens, self._moe)
            achieved = flops / delta_time / 1e12
        return achieved, get_device_flops()
