"""verl's MindSpeed engine for Ascend NPUs: Megatron-LM with MindSpeed's patches. Neither NPUs nor Megatron are
part of this build; the names import and raise ``MissingExtraError`` when used."""

from verl.utils.extras import unavailable_class, unavailable_function
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead, MegatronEngineWithValueHead

__all__ = ["MindspeedEngineWithLMHead", "MindspeedEngineWithValueHead", "repatch"]

_FEATURE = "verl's MindSpeed engine (Megatron-LM on Ascend NPUs)"
_REASON = "this package trains with FSDP2 on CUDA or CPU only"

repatch = unavailable_function("repatch", __name__, _FEATURE, reason=_REASON)
MindspeedEngineWithLMHead = EngineRegistry.register("language_model", "megatron", device="npu")(
    unavailable_class("MindspeedEngineWithLMHead", __name__, _FEATURE, reason=_REASON, base=MegatronEngineWithLMHead)
)
MindspeedEngineWithValueHead = EngineRegistry.register("value_model", "megatron", device="npu")(
    unavailable_class(
        "MindspeedEngineWithValueHead", __name__, _FEATURE, reason=_REASON, base=MegatronEngineWithValueHead
    )
)
