"""SGLang weight-sync helpers that are plain tensor bookkeeping (importable without SGLang).

``get_named_tensor_buckets`` groups a weight stream into buckets for ``update_weights_from_tensor``. SGLang fuses a
few DeepSeek-V4 attention projections into one parameter on load (``wq_a`` + ``wkv`` into ``wqkv_a``, the
compressor's ``wkv`` + ``wgate``); its loader concatenates the halves inside one ``load_weights`` call, so both must
arrive in the same bucket: pass ``DEEPSEEK_V4_FUSION_GROUPS`` for such models.
"""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from verl.checkpoint_engine.buckets import BucketPacker

__all__ = [
    "DEEPSEEK_V4_FUSION_GROUPS",
    "SGLANG_LORA_NAME",
    "broadcast_pyobj",
    "get_named_tensor_buckets",
    "normalize_peft_config_for_sglang",
    "sglang_lora_target_modules",
]

# Adapter name under which the trainer's LoRA weights are loaded into SGLang.
SGLANG_LORA_NAME = "verl_actor_lora_name"

_DEEPSEEK_V4_FUSED_PAIRS = (
    ("wq_a.weight", "wkv.weight"),
    ("wq_a.scale", "wkv.scale"),
    ("wq_a.weight_scale_inv", "wkv.weight_scale_inv"),
    ("compressor.wkv.weight", "compressor.wgate.weight"),
    ("indexer.compressor.wkv.weight", "indexer.compressor.wgate.weight"),
)
# Name suffixes of the tensors SGLang fuses on load, per attention module spelling ("self_attn" or "attn").
DEEPSEEK_V4_FUSION_GROUPS: tuple[tuple[str, ...], ...] = tuple(
    tuple(f".{module}.{member}" for member in pair)
    for module in ("self_attn", "attn")
    for pair in _DEEPSEEK_V4_FUSED_PAIRS
)


def _owning_storage(tensor: torch.Tensor) -> torch.Tensor:
    """A view would keep its whole base buffer alive (and ship it) while the bucket waits: copy views only; a
    freshly gathered full tensor already owns its storage and is kept as is (no second copy of a large weight)."""
    return tensor.clone() if tensor._base is not None else tensor


async def _as_async(source: Any) -> AsyncIterator[tuple[str, torch.Tensor]]:
    if hasattr(source, "__aiter__"):
        async for item in source:
            yield item
    else:
        for item in source:
            yield item


async def get_named_tensor_buckets(
    iterable: Iterable[tuple[str, torch.Tensor]] | AsyncIterator[tuple[str, torch.Tensor]],
    bucket_bytes: int,
    fusion_groups: tuple[tuple[str, ...], ...] = (),
) -> AsyncIterator[list[tuple[str, torch.Tensor]]]:
    """Yield ``[(name, tensor), ...]`` buckets of at most ``bucket_bytes`` (a larger tensor travels alone).

    Args:
        iterable: ``(name, tensor)`` pairs, sync or async.
        bucket_bytes: the bound on one bucket's payload.
        fusion_groups: name-suffix groups whose members must share a bucket (``DEEPSEEK_V4_FUSION_GROUPS``).

    Raises:
        ValueError: ``bucket_bytes`` is not positive, or a fusion group was still incomplete at the end.
    """
    packer = BucketPacker(bucket_bytes, fusion_groups)
    async for name, tensor in _as_async(iterable):
        for bucket in packer.add(name, _owning_storage(tensor)):
            yield bucket
    for bucket in packer.finish():
        yield bucket


def normalize_peft_config_for_sglang(peft_config: dict[str, Any]) -> dict[str, Any]:
    """A trainer's adapter config as SGLang's adapter loader reads it: enum values as strings, target modules as a
    list (a single string such as ``"all-linear"`` stays a string)."""
    normalized = dict(peft_config)
    for key in ("task_type", "peft_type"):
        if key in normalized:
            normalized[key] = getattr(normalized[key], "value", normalized[key])
    if "peft_type" not in normalized:
        raise ValueError(
            f"adapter config has no 'peft_type', which SGLang's adapter loader requires; keys: {sorted(normalized)}"
        )
    targets = normalized.get("target_modules")
    if targets is not None and not isinstance(targets, str):
        normalized["target_modules"] = list(targets)
    return normalized


def sglang_lora_target_modules(target_modules: Any) -> list[str]:
    """``model.target_modules`` as SGLang's ``lora_target_modules``: ``"all-linear"`` is ``["all"]``; a regex
    cannot be served (PEFT matches it against whole parameter keys, SGLang against module names)."""
    if target_modules == "all-linear":
        return ["all"]
    if isinstance(target_modules, str):
        raise ValueError(
            f"SGLang cannot serve model.target_modules={target_modules!r} (a regex); use 'all-linear' or a list of "
            "module names"
        )
    return list(target_modules)


def broadcast_pyobj(
    data: list[Any], rank: int, dist_group: Any = None, src: int = 0, force_cpu_device: bool = False
) -> list[Any]:
    """Broadcast a picklable list from global rank ``src`` to the other ranks of ``dist_group``.

    ``rank`` is this process's global rank. The payload travels as one uint8 tensor after its length, on CUDA when
    available (NCCL groups) unless ``force_cpu_device``.
    """
    device = torch.device("cuda" if torch.cuda.is_available() and not force_cpu_device else "cpu")
    if rank == src:
        payload = pickle.dumps(data) if data else b""
        size = torch.tensor([len(payload)], dtype=torch.long, device=device)
        dist.broadcast(size, src=src, group=dist_group)
        if payload:
            buffer = torch.from_numpy(np.frombuffer(payload, dtype=np.uint8).copy()).to(device)
            dist.broadcast(buffer, src=src, group=dist_group)
        return data
    size = torch.zeros(1, dtype=torch.long, device=device)
    dist.broadcast(size, src=src, group=dist_group)
    if int(size.item()) == 0:
        return []
    buffer = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(buffer, src=src, group=dist_group)
    return pickle.loads(buffer.cpu().numpy().tobytes())
