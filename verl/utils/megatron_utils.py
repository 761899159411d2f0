"""verl's Megatron-Core model, offload and checkpoint-path helpers (``verl.utils.megatron_utils``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_class, megatron_function

__all__ = [
    "McoreModuleWrapperConfig",
    "broadcast_from_megatron_pp",
    "broadcast_str_from_megatron_pp",
    "convert_config",
    "convert_megatron_model_to_transformers_model",
    "copy_megatron_model_to_cpu",
    "default_tp_concat_fn",
    "get_dist_checkpoint_path",
    "get_extra_checkpoint_path",
    "get_extra_dist_checkpoint_path",
    "get_hf_config_attr",
    "get_hf_model_checkpoint_path",
    "get_hf_rope_theta",
    "get_megatron_module_device",
    "get_megatron_mtp_loss",
    "get_model",
    "get_model_checkpoint_path",
    "get_model_config",
    "get_model_dist_checkpoint_path",
    "get_optimizer_checkpoint_path",
    "get_optimizer_dist_checkpoint_path",
    "get_transformer_config_checkpoint_path",
    "get_transformer_layer_offset",
    "load_megatron_copy_params",
    "load_megatron_model_to_gpu",
    "load_megatron_optimizer",
    "make_megatron_module",
    "mcore_model_parallel_config",
    "offload_megatron_copy_params",
    "offload_megatron_model_to_cpu",
    "offload_megatron_optimizer",
    "per_tensor_generator",
    "register_megatron_training_hooks",
    "restore_megatron_model_from_cpu",
    "unwrap_model",
]

McoreModuleWrapperConfig = megatron_class("McoreModuleWrapperConfig", __name__)
get_model = megatron_function("get_model", __name__)
get_model_config = megatron_function("get_model_config", __name__)
convert_config = megatron_function("convert_config", __name__)
mcore_model_parallel_config = megatron_function("mcore_model_parallel_config", __name__)
make_megatron_module = megatron_function("make_megatron_module", __name__)
unwrap_model = megatron_function("unwrap_model", __name__)
offload_megatron_model_to_cpu = megatron_function("offload_megatron_model_to_cpu", __name__)
load_megatron_model_to_gpu = megatron_function("load_megatron_model_to_gpu", __name__)
offload_megatron_copy_params = megatron_function("offload_megatron_copy_params", __name__)
load_megatron_copy_params = megatron_function("load_megatron_copy_params", __name__)
offload_megatron_optimizer = megatron_function("offload_megatron_optimizer", __name__)
load_megatron_optimizer = megatron_function("load_megatron_optimizer", __name__)
get_dist_checkpoint_path = megatron_function("get_dist_checkpoint_path", __name__)
get_hf_model_checkpoint_path = megatron_function("get_hf_model_checkpoint_path", __name__)
get_transformer_config_checkpoint_path = megatron_function("get_transformer_config_checkpoint_path", __name__)
get_model_checkpoint_path = megatron_function("get_model_checkpoint_path", __name__)
get_optimizer_checkpoint_path = megatron_function("get_optimizer_checkpoint_path", __name__)
get_extra_checkpoint_path = megatron_function("get_extra_checkpoint_path", __name__)
get_model_dist_checkpoint_path = megatron_function("get_model_dist_checkpoint_path", __name__)
get_optimizer_dist_checkpoint_path = megatron_function("get_optimizer_dist_checkpoint_path", __name__)
get_extra_dist_checkpoint_path = megatron_function("get_extra_dist_checkpoint_path", __name__)
convert_megatron_model_to_transformers_model = megatron_function(
    "convert_megatron_model_to_transformers_model", __name__
)
broadcast_from_megatron_pp = megatron_function("broadcast_from_megatron_pp", __name__)
broadcast_str_from_megatron_pp = megatron_function("broadcast_str_from_megatron_pp", __name__)
default_tp_concat_fn = megatron_function("default_tp_concat_fn", __name__)
per_tensor_generator = megatron_function("per_tensor_generator", __name__)
get_transformer_layer_offset = megatron_function("get_transformer_layer_offset", __name__)
register_megatron_training_hooks = megatron_function("register_megatron_training_hooks", __name__)
get_megatron_mtp_loss = megatron_function("get_megatron_mtp_loss", __name__)
get_megatron_module_device = megatron_function("get_megatron_module_device", __name__)
copy_megatron_model_to_cpu = megatron_function("copy_megatron_model_to_cpu", __name__)
restore_megatron_model_from_cpu = megatron_function("restore_megatron_model_from_cpu", __name__)
get_hf_config_attr = megatron_function("get_hf_config_attr", __name__)
get_hf_rope_theta = megatron_function("get_hf_rope_theta", __name__)
