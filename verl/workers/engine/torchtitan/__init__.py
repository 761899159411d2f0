"""verl's TorchTitan engine (not part of this build; see :mod:`verl.workers.engine.torchtitan.transformer_impl`)."""

from verl.workers.engine.torchtitan.transformer_impl import TorchTitanEngine, TorchTitanEngineWithLMHead

__all__ = ["TorchTitanEngine", "TorchTitanEngineWithLMHead"]
