"""verl's ``bucketed_weight_transfer``: shipping weight buckets from a trainer rank to a colocated vLLM worker over
ZeroMQ with CUDA IPC or shared memory.

Not part of this build: weights reach the vLLM server through the checkpoint engine (:mod:`verl.checkpoint_engine`,
which buckets them with :class:`~verl.checkpoint_engine.buckets.BucketPacker`). The sender and receiver classes
import and raise ``MissingExtraError`` when built.
"""

from verl.utils.extras import unavailable_class

__all__ = ["BucketedWeightReceiver", "BucketedWeightSender"]

_FEATURE = "verl's ZeroMQ / CUDA-IPC weight transfer to a colocated vLLM worker"
_REASON = "weights reach the vLLM server through the checkpoint engine (verl.checkpoint_engine) here"

BucketedWeightSender = unavailable_class("BucketedWeightSender", __name__, _FEATURE, extra="vllm", reason=_REASON)
BucketedWeightReceiver = unavailable_class("BucketedWeightReceiver", __name__, _FEATURE, extra="vllm", reason=_REASON)
