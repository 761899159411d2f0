"""Trainer -> rollout weight transfer: ``naive`` (same process), ``ray`` (object store), ``collective`` (broadcast).

See README.md in this folder for the worker-side protocol (``send_weights``).
"""

from verl.checkpoint_engine.base import (
    CheckpointEngine,
    WeightSyncRequest,
    combine_bucket_checksums,
    get_checkpoint_engine_cls,
    list_checkpoint_engines,
    register_checkpoint_engine,
    send_weights,
)
from verl.checkpoint_engine.buckets import (
    bucket_nbytes,
    iter_named_weights,
    iter_weight_buckets,
    megabytes_to_bytes,
    normalize_weight_name,
)
from verl.checkpoint_engine.manager import CheckpointEngineManager, WeightSyncError

__all__ = [
    "CheckpointEngine",
    "CheckpointEngineManager",
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
