"""Qwen2-VL / Qwen2.5-VL helpers (verl's import path): ``get_rope_index`` for text-only sequences."""

from __future__ import annotations

from typing import Any

import torch

from verl.models.transformers.rope_index import text_rope_index

__all__ = ["get_rope_index"]


def get_rope_index(
    processor: Any,
    input_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """``(3, seq_len)`` rotary positions of one sequence; image/video grids raise ``NotImplementedError``."""
    return text_rope_index(
        "qwen2_vl", input_ids, attention_mask, {"image_grid_thw": image_grid_thw, "video_grid_thw": video_grid_thw}
    )
