"""verl's ``verl.utils.fsdp_utils`` for this package's FSDP2 models: sharding, offloading, state dicts, LoRA.

The workers shard with FSDP2 (:mod:`verl.workers.fsdp`); these are the helpers verl code and recipes call on such
models, under verl's names and signatures. FSDP1 ``FullyShardedDataParallel`` modules are never created here and are
refused with a TypeError by every helper that would need FSDP1-only machinery. torch's FSDP2 names
(``FSDPModule``, ``fully_shard``, ``MixedPrecisionPolicy``, ``CPUOffloadPolicy``) are re-exported as verl does.
"""

from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from verl.utils.fsdp_utils.common import FSDP, fsdp_version
from verl.utils.fsdp_utils.init import get_init_weight_context_manager, init_fn, meta_device_init
from verl.utils.fsdp_utils.lora import (
    collect_lora_params,
    layered_summon_lora_params,
    normalize_peft_param_name,
    replace_lora_wrapper,
)
from verl.utils.fsdp_utils.offload import (
    load_fsdp2_model_to_gpu,
    load_fsdp_grad,
    load_fsdp_model_to_gpu,
    load_fsdp_optimizer,
    load_fsdp_param_and_grad,
    offload_fsdp2_model_to_cpu,
    offload_fsdp_grad,
    offload_fsdp_model_to_cpu,
    offload_fsdp_optimizer,
    offload_fsdp_param_and_grad,
)
from verl.utils.fsdp_utils.state_dict import (
    fsdp2_clip_grad_norm_,
    fsdp2_load_full_state_dict,
    get_fsdp_full_state_dict,
    get_fsdp_state_ctx,
)
from verl.utils.fsdp_utils.wrap import (
    apply_fsdp2,
    get_fsdp_wrap_policy,
    get_shard_placement_fn,
    set_reshard_after_forward,
)

__all__ = [
    "CPUOffloadPolicy",
    "FSDP",
    "FSDPModule",
    "MixedPrecisionPolicy",
    "fully_shard",
    "fsdp_version",
    "init_fn",
    "meta_device_init",
    "get_init_weight_context_manager",
    "get_fsdp_wrap_policy",
    "apply_fsdp2",
    "get_shard_placement_fn",
    "set_reshard_after_forward",
    "offload_fsdp_model_to_cpu",
    "load_fsdp_model_to_gpu",
    "offload_fsdp2_model_to_cpu",
    "load_fsdp2_model_to_gpu",
    "offload_fsdp_optimizer",
    "load_fsdp_optimizer",
    "offload_fsdp_grad",
    "load_fsdp_grad",
    "offload_fsdp_param_and_grad",
    "load_fsdp_param_and_grad",
    "get_fsdp_state_ctx",
    "get_fsdp_full_state_dict",
    "fsdp2_load_full_state_dict",
    "fsdp2_clip_grad_norm_",
    "layered_summon_lora_params",
    "collect_lora_params",
    "replace_lora_wrapper",
    "normalize_peft_param_name",
]
