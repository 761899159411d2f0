"""verl's Megatron tensor-parallel layer defaults and vocab-parallel log-prob/entropy kernels
(``verl.utils.megatron.tensor_parallel``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_function

__all__ = [
    "get_common_default_kwargs_for_parallel_linear",
    "get_default_kwargs_for_column_parallel_linear",
    "get_default_kwargs_for_model_parallel_config",
    "get_default_kwargs_for_parallel_embedding",
    "get_default_kwargs_for_row_parallel_linear",
    "get_default_model_parallel_config",
    "get_tensor_parallel_partition_dim",
    "get_tensor_parallel_partition_stride",
    "is_tensor_parallel_param",
    "update_kwargs_with_config",
    "vocab_parallel_entropy",
    "vocab_parallel_entropy_with_chunking",
    "vocab_parallel_log_probs_from_logits",
    "vocab_parallel_log_probs_from_logits_response_rmpad",
    "vocab_parallel_sum_pi_squared",
]

update_kwargs_with_config = megatron_function("update_kwargs_with_config", __name__)
get_default_kwargs_for_model_parallel_config = megatron_function(
    "get_default_kwargs_for_model_parallel_config", __name__
)
get_default_model_parallel_config = megatron_function("get_default_model_parallel_config", __name__)
get_common_default_kwargs_for_parallel_linear = megatron_function(
    "get_common_default_kwargs_for_parallel_linear", __name__
)
get_default_kwargs_for_column_parallel_linear = megatron_function(
    "get_default_kwargs_for_column_parallel_linear", __name__
)
get_default_kwargs_for_row_parallel_linear = megatron_function("get_default_kwargs_for_row_parallel_linear", __name__)
get_default_kwargs_for_parallel_embedding = megatron_function("get_default_kwargs_for_parallel_embedding", __name__)
is_tensor_parallel_param = megatron_function("is_tensor_parallel_param", __name__)
get_tensor_parallel_partition_dim = megatron_function("get_tensor_parallel_partition_dim", __name__)
get_tensor_parallel_partition_stride = megatron_function("get_tensor_parallel_partition_stride", __name__)
vocab_parallel_entropy = megatron_function("vocab_parallel_entropy", __name__)
vocab_parallel_entropy_with_chunking = megatron_function("vocab_parallel_entropy_with_chunking", __name__)
vocab_parallel_sum_pi_squared = megatron_function("vocab_parallel_sum_pi_squared", __name__)
vocab_parallel_log_probs_from_logits = megatron_function("vocab_parallel_log_probs_from_logits", __name__)
vocab_parallel_log_probs_from_logits_response_rmpad = megatron_function(
    "vocab_parallel_log_probs_from_logits_response_rmpad", __name__
)
