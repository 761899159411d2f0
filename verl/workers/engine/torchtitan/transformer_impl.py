"""verl's TorchTitan engine classes. Not part of this build (FSDP2 over Hugging Face models only): the classes
import, are registered for ``backend="torchtitan"`` and raise ``MissingExtraError`` when built."""

from verl.utils.extras import unavailable_class
from verl.workers.engine.base import BaseEngine, EngineRegistry

__all__ = ["TorchTitanEngine", "TorchTitanEngineWithLMHead"]

_FEATURE = "verl's TorchTitan engine"
_REASON = "this package trains Hugging Face models with its FSDP2 engine (backend fsdp/fsdp2)"

TorchTitanEngine = unavailable_class(
    "TorchTitanEngine", __name__, _FEATURE, package="torchtitan", reason=_REASON, base=BaseEngine
)
TorchTitanEngineWithLMHead = EngineRegistry.register("language_model", "torchtitan", device=["cuda", "cpu"])(
    unavailable_class(
        "TorchTitanEngineWithLMHead", __name__, _FEATURE, package="torchtitan", reason=_REASON, base=TorchTitanEngine
    )
)
