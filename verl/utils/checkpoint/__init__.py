"""verl's checkpoint-manager API: ``BaseCheckpointManager`` and the per-rank ``FSDPCheckpointManager`` layout.

The trainer's workers save with :mod:`verl.utils.checkpoint.dcp_checkpoint_manager` (a resharding-friendly
layout); ``FSDPCheckpointManager`` of :mod:`verl.utils.checkpoint.fsdp_checkpoint_manager` reads that layout too.
The managers load on first access (they import torch); :mod:`verl.utils.checkpoint.config`, which the config
dataclasses import, does not.
"""

from typing import TYPE_CHECKING

from verl.utils.import_utils import lazy_exports

if TYPE_CHECKING:
    from verl.utils.checkpoint.checkpoint_manager import (
        BaseCheckpointManager,
        find_latest_ckpt_path,
        get_checkpoint_tracker_filename,
        should_save_ckpt_esi,
    )

__all__ = [
    "BaseCheckpointManager",
    "find_latest_ckpt_path",
    "get_checkpoint_tracker_filename",
    "should_save_ckpt_esi",
]

__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "verl.utils.checkpoint.checkpoint_manager"))
