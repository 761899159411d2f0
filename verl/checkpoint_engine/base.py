"""verl's ``verl.checkpoint_engine.base`` import path.

The streaming contract (``CheckpointEngine``, ``CheckpointEngineRegistry``, ``ColocatedCheckpointEngine``,
``TensorMeta``) is in :mod:`~verl.checkpoint_engine.streaming`, the receiving worker in
:mod:`~verl.checkpoint_engine.worker`, the manager the trainers call in :mod:`~verl.checkpoint_engine.manager`.
"""

from verl.checkpoint_engine.manager import CheckpointEngineManager
from verl.checkpoint_engine.streaming import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    CheckpointEngineWithCache,
    ColocatedCheckpointEngine,
    TensorMeta,
    merge_weight_chunks,
    split_weight_chunks,
)
from verl.checkpoint_engine.worker import CheckpointEngineWorker

__all__ = [
    "CheckpointEngine",
    "CheckpointEngineManager",
    "CheckpointEngineRegistry",
    "CheckpointEngineWithCache",
    "CheckpointEngineWorker",
    "ColocatedCheckpointEngine",
    "TensorMeta",
    "merge_weight_chunks",
    "split_weight_chunks",
]
