"""verl's model-engine API: :class:`BaseEngine`, :class:`EngineRegistry` and the registered engines.

``EngineRegistry.new("language_model" | "value_model", "fsdp" | "fsdp2", model_config, engine_config,
optimizer_config, checkpoint_config)`` builds this package's FSDP2 engine (:mod:`verl.workers.engine.fsdp`). The
``megatron`` and ``torchtitan`` backends are registered too, so that asking for them fails by name: they are not
part of this build.
"""

from verl.workers.engine.base import BaseEngine, BaseEngineCtx, EngineRegistry
from verl.workers.engine.fsdp import FSDPEngine, FSDPEngineWithLMHead, FSDPEngineWithValueHead
from verl.workers.engine.megatron import MegatronEngine, MegatronEngineWithLMHead, MegatronEngineWithValueHead
from verl.workers.engine.mindspeed import MindspeedEngineWithLMHead, MindspeedEngineWithValueHead
from verl.workers.engine.torchtitan import TorchTitanEngine, TorchTitanEngineWithLMHead

__all__ = [
    "BaseEngine",
    "BaseEngineCtx",
    "EngineRegistry",
    "FSDPEngine",
    "FSDPEngineWithLMHead",
    "FSDPEngineWithValueHead",
    "MegatronEngine",
    "MegatronEngineWithLMHead",
    "MegatronEngineWithValueHead",
    "MindspeedEngineWithLMHead",
    "MindspeedEngineWithValueHead",
    "TorchTitanEngine",
    "TorchTitanEngineWithLMHead",
]
