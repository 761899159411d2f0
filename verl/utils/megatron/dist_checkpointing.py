"""verl's Megatron distributed-checkpoint save and load (``verl.utils.megatron.dist_checkpointing``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_function

__all__ = [
    "load_dist_checkpointing",
    "save_dist_checkpointing",
]

save_dist_checkpointing = megatron_function("save_dist_checkpointing", __name__)
load_dist_checkpointing = megatron_function("load_dist_checkpointing", __name__)
