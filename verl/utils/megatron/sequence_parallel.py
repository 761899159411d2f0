"""verl's Megatron sequence-parallel parameter helpers (``verl.utils.megatron.sequence_parallel``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_function

__all__ = [
    "is_sequence_parallel_param",
    "mark_parameter_as_sequence_parallel",
    "pad_to_sequence_parallel",
]

mark_parameter_as_sequence_parallel = megatron_function("mark_parameter_as_sequence_parallel", __name__)
is_sequence_parallel_param = megatron_function("is_sequence_parallel_param", __name__)
pad_to_sequence_parallel = megatron_function("pad_to_sequence_parallel", __name__)
