"""Batch layouts of SFT-style data sets and the collator that builds them.

``right`` / ``left_right``: every sample is already padded to one length, so the batch is a plain stack.
``no_padding``: samples keep their own lengths and the batch holds jagged nested tensors (the layout the FSDP
engine consumes without padding tokens).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch

__all__ = ["DatasetPadMode", "SFTTensorCollator"]


class DatasetPadMode(str, Enum):
    """How a data set lays out a sample's tokens."""

    RIGHT = "right"
    LEFT_RIGHT = "left_right"
    NO_PADDING = "no_padding"


def _nested(tensors: list[torch.Tensor], key: str) -> torch.Tensor:
    try:
        return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)
    except (RuntimeError, ValueError):  # more than one ragged dimension: only the strided layout holds it
        try:
            return torch.nested.as_nested_tensor(tensors, layout=torch.strided)
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"SFTTensorCollator: cannot batch {key!r} ({exc})") from exc


class SFTTensorCollator:
    """``collate_fn`` for the layouts of :class:`DatasetPadMode`: a stack for padded samples, nested tensors for
    unpadded ones (non-tensor fields become a ``NonTensorStack``)."""

    def __init__(self, pad_mode: DatasetPadMode | str = DatasetPadMode.LEFT_RIGHT) -> None:
        self.pad_mode = DatasetPadMode(pad_mode)

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        if self.pad_mode == DatasetPadMode.NO_PADDING:
            return self.collate_variable_batch(batch)
        from torch.utils.data import default_collate

        return default_collate(batch)

    def collate_variable_batch(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        """One entry per key of any sample: tensors as a nested tensor, everything else as a ``NonTensorStack``."""
        from tensordict import NonTensorData

        keys = dict.fromkeys(key for sample in batch for key in sample)
        out: dict[str, Any] = {}
        for key in keys:
            values = [sample.get(key) for sample in batch]
            if isinstance(values[0], torch.Tensor):
                if not all(isinstance(v, torch.Tensor) for v in values):
                    raise ValueError(f"SFTTensorCollator: {key!r} is a tensor in some samples and missing in others")
                out[key] = _nested(values, key)
            else:
                out[key] = torch.stack([NonTensorData(v) for v in values], dim=0)
        return out
