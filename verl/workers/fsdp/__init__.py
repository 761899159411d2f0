"""Building blocks of the FSDP2 workers: process group and mesh, model loading, sharding, optimizer, checkpoints,
weight gathering for the rollout and the hybrid rollout engine. The workers themselves are exported by
:mod:`verl.workers.fsdp_workers`."""

from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager

__all__ = ["FSDPCheckpointManager"]
