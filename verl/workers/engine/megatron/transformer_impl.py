"""verl's Megatron-LM engine classes. This build trains with FSDP2 only: the classes import, subclass
:class:`~verl.workers.engine.base.BaseEngine` and are registered for ``backend="megatron"`` so that selecting that
backend fails with ``MissingExtraError`` saying so (instead of "unknown backend")."""

from verl.models.mcore._missing import megatron_class
from verl.workers.engine.base import BaseEngine, EngineRegistry

__all__ = ["MegatronEngine", "MegatronEngineWithLMHead", "MegatronEngineWithValueHead"]

_DEVICES = ["cuda", "cpu"]

MegatronEngine = megatron_class("MegatronEngine", __name__, base=BaseEngine)
MegatronEngineWithLMHead = EngineRegistry.register("language_model", "megatron", device=_DEVICES)(
    megatron_class("MegatronEngineWithLMHead", __name__, base=MegatronEngine)
)
MegatronEngineWithValueHead = EngineRegistry.register("value_model", "megatron", device=_DEVICES)(
    megatron_class("MegatronEngineWithValueHead", __name__, base=MegatronEngineWithLMHead)
)
