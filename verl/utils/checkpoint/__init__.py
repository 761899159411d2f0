"""verl's checkpoint-manager API: ``BaseCheckpointManager`` and the per-rank ``FSDPCheckpointManager`` layout.

The trainer's workers save with :mod:`verl.utils.checkpoint.dcp_checkpoint_manager` (a resharding-friendly
layout); ``FSDPCheckpointManager`` of :mod:`verl.utils.checkpoint.fsdp_checkpoint_manager` reads that layout too.
"""

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
