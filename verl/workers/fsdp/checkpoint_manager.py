"""The FSDP2 workers' checkpoint manager (a ``torch.distributed.checkpoint`` layout any world size can load);
implemented in :mod:`verl.utils.checkpoint.dcp_checkpoint_manager`."""

from verl.utils.checkpoint.dcp_checkpoint_manager import FSDPCheckpointManager, capture_rng_state, restore_rng_state

__all__ = ["FSDPCheckpointManager", "capture_rng_state", "restore_rng_state"]
