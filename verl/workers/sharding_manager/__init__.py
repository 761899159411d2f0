"""verl's sharding managers: context managers around a phase of a hybrid worker that reshard data or weights
between the training engine and another consumer (sequence-parallel groups, an in-trainer inference engine).

In this package the weight hand-over to the rollout engine is the checkpoint engine's job
(:mod:`verl.checkpoint_engine`), and there is no sequence parallelism, so :class:`FSDPUlyssesShardingManager` is
the identity for a worker without a sequence-parallel mesh and :class:`FSDPVLLMShardingManager` is not part of this
build.
"""

from verl.workers.sharding_manager.base import BaseShardingManager
from verl.workers.sharding_manager.fsdp_ulysses import FSDPUlyssesShardingManager
from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

__all__ = ["BaseShardingManager", "FSDPUlyssesShardingManager", "FSDPVLLMShardingManager"]
