"""Trainer -> rollout weight transfer.

``CheckpointEngineManager`` publishes a weight version to every replica through a backend: ``naive`` (same process),
``ray`` (object store) or ``collective`` (broadcast); see README.md for the worker-side protocol (``send_weights``).
verl's per-process streaming contract (``CheckpointEngine``, ``CheckpointEngineRegistry``,
``CheckpointEngineWorker``) is exported too, for plugins written against it.
"""

from verl.checkpoint_engine.backend import (
    WeightSyncBackend,
    WeightSyncRequest,
    combine_bucket_checksums,
    get_checkpoint_engine_cls,
    list_checkpoint_engines,
    register_checkpoint_engine,
    send_weights,
)
from verl.checkpoint_engine.buckets import (
    BucketPacker,
    bucket_nbytes,
    iter_named_weights,
    iter_weight_buckets,
    megabytes_to_bytes,
    normalize_weight_name,
)
from verl.checkpoint_engine.manager import CheckpointEngineManager, WeightSyncError
from verl.checkpoint_engine.streaming import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    ColocatedCheckpointEngine,
    TensorMeta,
)
from verl.checkpoint_engine.worker import CheckpointEngineWorker

__all__ = [
    "BucketPacker",
    "CheckpointEngine",
    "CheckpointEngineManager",
    "CheckpointEngineRegistry",
    "CheckpointEngineWorker",
    "ColocatedCheckpointEngine",
    "TensorMeta",
    "WeightSyncBackend",
    "WeightSyncError",
    "WeightSyncRequest",
    "bucket_nbytes",
    "combine_bucket_checksums",
    "get_checkpoint_engine_cls",
    "iter_named_weights",
    "iter_weight_buckets",
    "list_checkpoint_engines",
    "megabytes_to_bytes",
    "normalize_weight_name",
    "register_checkpoint_engine",
    "send_weights",
]
