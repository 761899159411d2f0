"""Old path of :mod:`verl.workers.utils.padding` (verl 0.6-0.7); the same functions."""

from verl.workers.utils.padding import (
    build_attention_mask_from_nested,
    left_right_2_no_padding,
    no_padding_2_padding,
    response_from_nested,
    response_to_nested,
)

__all__ = [
    "build_attention_mask_from_nested",
    "left_right_2_no_padding",
    "no_padding_2_padding",
    "response_from_nested",
    "response_to_nested",
]
