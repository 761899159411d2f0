"""verl's ``verl.models.mcore``: Megatron-Core model builders and HF<->mcore weight converters.

Not part of this build (it trains with FSDP2 only); the names import so that recipes load, and calling any of
them raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_function

__all__ = [
    "get_mcore_engine_forward_fn",
    "get_mcore_forward_fn",
    "get_mcore_forward_fused_fn",
    "get_mcore_forward_fused_model_engine_fn",
    "get_mcore_weight_converter",
    "hf_to_mcore_config",
    "init_mcore_model",
]

hf_to_mcore_config = megatron_function("hf_to_mcore_config", __name__)
init_mcore_model = megatron_function("init_mcore_model", __name__)
get_mcore_forward_fn = megatron_function("get_mcore_forward_fn", __name__)
get_mcore_engine_forward_fn = megatron_function("get_mcore_engine_forward_fn", __name__)
get_mcore_forward_fused_fn = megatron_function("get_mcore_forward_fused_fn", __name__)
get_mcore_forward_fused_model_engine_fn = megatron_function("get_mcore_forward_fused_model_engine_fn", __name__)
get_mcore_weight_converter = megatron_function("get_mcore_weight_converter", __name__)
