"""``FSDPVLLMShardingManager``: verl's hand-over of FSDP weights to a vLLM engine living in the trainer's ranks.

Not part of this build: vLLM runs as a rollout server here (``rollout.name=vllm``) and receives weights from the
checkpoint engine (:mod:`verl.checkpoint_engine`). The class imports and subclasses
:class:`~verl.workers.sharding_manager.base.BaseShardingManager`; building one raises ``MissingExtraError``.
"""

from verl.utils.extras import unavailable_class
from verl.workers.sharding_manager.base import BaseShardingManager

__all__ = ["FSDPVLLMShardingManager"]

FSDPVLLMShardingManager = unavailable_class(
    "FSDPVLLMShardingManager",
    __name__,
    "verl's in-trainer (SPMD) vLLM engine",
    package="vllm",
    extra="vllm",
    reason="vLLM runs as a rollout server here (rollout.name=vllm), fed by the checkpoint engine",
    base=BaseShardingManager,
)
