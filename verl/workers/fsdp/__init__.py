"""Building blocks of the FSDP2 workers: process group and mesh, model loading, sharding, optimizer, checkpoints,
weight gathering for the rollout and the hybrid rollout engine. The workers themselves are exported by
:mod:`verl.workers.fsdp_workers`.

The checkpoint manager loads on first access: processes that only read a worker config from this package (agent-loop
workers, the task runner) would otherwise import ``torch.distributed.checkpoint`` and DTensor, seconds per process."""

from typing import TYPE_CHECKING

from verl.utils.import_utils import lazy_exports

if TYPE_CHECKING:
    from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager

__all__ = ["FSDPCheckpointManager"]

__getattr__ = lazy_exports(__name__, {"FSDPCheckpointManager": "verl.workers.fsdp.checkpoint_manager"})
