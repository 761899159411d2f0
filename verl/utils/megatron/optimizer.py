"""verl's Megatron optimizer construction (``verl.utils.megatron.optimizer``).

This build trains with FSDP2 only, so Megatron-LM is not part of it: the names import (recipes that
mention them still load) and calling or instantiating one raises ``MissingExtraError`` saying so.
"""

from verl.models.mcore._missing import megatron_function

__all__ = [
    "get_megatron_last_lr",
    "get_megatron_optimizer",
    "get_megatron_optimizer_param_scheduler",
    "init_megatron_optim_config",
]

init_megatron_optim_config = megatron_function("init_megatron_optim_config", __name__)
get_megatron_optimizer = megatron_function("get_megatron_optimizer", __name__)
get_megatron_optimizer_param_scheduler = megatron_function("get_megatron_optimizer_param_scheduler", __name__)
get_megatron_last_lr = megatron_function("get_megatron_last_lr", __name__)
