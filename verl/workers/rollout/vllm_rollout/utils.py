"""vLLM helpers that need no vLLM import (verl's ``verl.workers.rollout.vllm_rollout.utils``)."""

from __future__ import annotations

__all__ = ["VLLM_LORA_INT_ID", "VLLM_LORA_NAME", "VLLM_LORA_PATH", "VLLM_MAX_LORA_RANKS", "get_vllm_max_lora_rank"]

# how the trainer's LoRA adapter is registered in vLLM (an id, a name and a placeholder path)
VLLM_LORA_INT_ID = 123
VLLM_LORA_NAME = "123"
VLLM_LORA_PATH = "simon_lora_path"

# the max_lora_rank values vLLM accepts (its LoRA config's allowed ranks)
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _allowed_ranks() -> tuple[int, ...]:
    """vLLM's own list when vLLM is installed and exposes it, else the known list."""
    try:
        from typing import get_args

        from vllm.config.lora import MaxLoRARanks

        ranks = tuple(sorted(int(r) for r in get_args(MaxLoRARanks)))
        return ranks or VLLM_MAX_LORA_RANKS
    except Exception:
        return VLLM_MAX_LORA_RANKS


def get_vllm_max_lora_rank(lora_rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``lora_rank`` (model.lora_rank)."""
    if int(lora_rank) <= 0:
        raise ValueError(f"model.lora_rank must be > 0 to serve a LoRA adapter with vLLM, got {lora_rank}")
    ranks = _allowed_ranks()
    for rank in ranks:
        if lora_rank <= rank:
            return rank
    raise ValueError(f"model.lora_rank={lora_rank} exceeds the largest rank vLLM serves ({ranks[-1]})")
