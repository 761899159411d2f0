"""Precision names as they appear in configs (``bf16``, ``fp32``, 16, ...) and their torch dtypes.

verl code and recipes spell precisions many ways; :class:`PrecisionType` answers "is this fp16 / bf16 / fp32?" and
converts both directions, so a config value never has to be compared against one spelling.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["HALF_LIST", "FLOAT_LIST", "BFLOAT_LIST", "PrecisionType"]

HALF_LIST: list[Any] = [16, "16", "fp16", "float16", torch.float16]
FLOAT_LIST: list[Any] = [32, "32", "fp32", "float32", torch.float32]
BFLOAT_LIST: list[Any] = ["bf16", "bfloat16", torch.bfloat16]


class PrecisionType:
    """The precision names verl knows, and conversions between spellings and torch dtypes."""

    HALF = "16"
    FLOAT = "32"
    FULL = "64"
    BFLOAT = "bf16"
    MIXED = "mixed"

    @staticmethod
    def supported_types() -> list[str]:
        """The canonical names: ``["16", "32", "64", "bf16", "mixed"]``."""
        return [PrecisionType.HALF, PrecisionType.FLOAT, PrecisionType.FULL, PrecisionType.BFLOAT, PrecisionType.MIXED]

    @staticmethod
    def supported_type(precision: str | int) -> bool:
        """Whether ``precision`` is one of the canonical names (an int such as 16 counts as its string)."""
        return str(precision) in PrecisionType.supported_types()

    @staticmethod
    def is_fp16(precision: Any) -> bool:
        return precision in HALF_LIST

    @staticmethod
    def is_fp32(precision: Any) -> bool:
        return precision in FLOAT_LIST

    @staticmethod
    def is_bf16(precision: Any) -> bool:
        return precision in BFLOAT_LIST

    @staticmethod
    def to_dtype(precision: Any) -> torch.dtype:
        """The torch dtype of any spelling of fp16, fp32 or bf16; anything else is a RuntimeError naming it."""
        if precision in HALF_LIST:
            return torch.float16
        if precision in FLOAT_LIST:
            return torch.float32
        if precision in BFLOAT_LIST:
            return torch.bfloat16
        raise RuntimeError(f"unexpected precision {precision!r}; use one of {HALF_LIST + FLOAT_LIST + BFLOAT_LIST}")

    @staticmethod
    def to_str(precision: torch.dtype) -> str:
        """``"fp16"``, ``"fp32"`` or ``"bf16"`` for the matching torch dtype."""
        names = {torch.float16: "fp16", torch.float32: "fp32", torch.bfloat16: "bf16"}
        if precision not in names:
            raise RuntimeError(
                f"unexpected precision {precision!r}; use torch.float16, torch.float32 or torch.bfloat16"
            )
        return names[precision]
