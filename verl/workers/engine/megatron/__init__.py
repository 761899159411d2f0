"""verl's Megatron-LM engine (not part of this build; see :mod:`verl.workers.engine.megatron.transformer_impl`)."""

from verl.workers.engine.megatron.transformer_impl import (
    MegatronEngine,
    MegatronEngineWithLMHead,
    MegatronEngineWithValueHead,
)

__all__ = ["MegatronEngine", "MegatronEngineWithLMHead", "MegatronEngineWithValueHead"]
