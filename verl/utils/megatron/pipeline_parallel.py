"""verl's Megatron pipeline-parallel batching helpers (``verl.utils.megatron.pipeline_parallel``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_function

__all__ = [
    "compute_transformers_input_shapes",
    "make_batch_generator",
]

compute_transformers_input_shapes = megatron_function("compute_transformers_input_shapes", __name__)
make_batch_generator = megatron_function("make_batch_generator", __name__)
