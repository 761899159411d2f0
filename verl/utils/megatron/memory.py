"""verl's Megatron contiguous parameter buffer (``verl.utils.megatron.memory``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_class

__all__ = [
    "MemoryBuffer",
]

MemoryBuffer = megatron_class("MemoryBuffer", __name__)
