"""``model.enable_activation_offload`` for the FSDP workers; the hooks live in :mod:`verl.utils.activation_offload`."""

from verl.utils.activation_offload import enable_activation_offload

__all__ = ["enable_activation_offload"]
