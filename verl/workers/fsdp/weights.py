"""Full (unsharded) tensors of an FSDP2 module; implemented in :mod:`verl.utils.fsdp_utils.weights`."""

from verl.utils.fsdp_utils.weights import adapter_state, has_lora, iter_full_state

__all__ = ["iter_full_state", "adapter_state", "has_lora"]
