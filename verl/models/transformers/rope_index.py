"""Position ids of the Qwen vision-language families (``get_rope_index``), for text-only sequences.

These models take 3-D rotary positions (temporal, height, width). For text tokens all three rows are the ordinary
1-D positions; image and video tokens get grid positions, which need the vision inputs this package's rollout and
actor do not carry (they are text-only). So the text-only case is computed and a sequence with image or video grids
is refused, naming what is missing.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["text_rope_index"]


def text_rope_index(
    family: str, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, grids: dict[str, Any]
) -> torch.Tensor:
    """``(3, seq_len)`` positions of one unbatched sequence: ``cumsum(mask) - 1`` on real tokens (1 on padding), or
    ``arange(seq_len)`` without a mask, repeated over the three rope rows."""
    given = sorted(name for name, grid in grids.items() if grid is not None)
    if given:
        raise NotImplementedError(
            f"{family} get_rope_index: {given} given, but multimodal rotary positions are not "
            "supported here (the rollout and the actor are text-only)"
        )
    if input_ids.dim() != 1:
        raise ValueError(
            f"{family} get_rope_index takes one unbatched sequence (1-D input_ids), got shape {tuple(input_ids.shape)}"
        )
    if attention_mask is None:
        positions = torch.arange(input_ids.shape[0], device=input_ids.device)
    else:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"{family} get_rope_index: attention_mask shape {tuple(attention_mask.shape)} differs "
                f"from input_ids shape {tuple(input_ids.shape)}"
            )
        mask = attention_mask.to(input_ids.device)
        positions = mask.long().cumsum(-1) - 1
        positions = positions.masked_fill(mask == 0, 1)
    return positions.unsqueeze(0).expand(3, -1)
