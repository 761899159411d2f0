"""verl's MindSpeed (Ascend NPU Megatron) engine (not part of this build)."""

from verl.workers.engine.mindspeed.transformer_impl import MindspeedEngineWithLMHead, MindspeedEngineWithValueHead

__all__ = ["MindspeedEngineWithLMHead", "MindspeedEngineWithValueHead"]
