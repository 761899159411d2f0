"""verl's FSDP model engine, backed by this package's FSDP2 worker pieces."""

from verl.workers.engine.fsdp.transformer_impl import FSDPEngine, FSDPEngineWithLMHead, FSDPEngineWithValueHead

__all__ = ["FSDPEngine", "FSDPEngineWithLMHead", "FSDPEngineWithValueHead"]
