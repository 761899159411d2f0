"""verl's ``enable_activation_offloading(model, strategy, enable_ckpt)`` on this package's activation offload.

What a trainable model's forward saves for backward is moved to pinned host memory as it is saved and brought back
when backward needs it (:func:`verl.workers.fsdp.activation_offload.enable_activation_offload`, the
``model.enable_activation_offload`` switch). That works with FSDP2 sharding and with non-reentrant gradient
checkpointing as they are, so ``enable_ckpt`` needs no special handling here; on a CPU-only model there is nothing to
move and the model runs unchanged.
"""

from __future__ import annotations

from torch import nn

from verl.workers.fsdp.activation_offload import enable_activation_offload

__all__ = ["enable_activation_offloading", "enable_activation_offload"]

_STRATEGIES = ("fsdp", "fsdp2")


def enable_activation_offloading(model: nn.Module, strategy: str, enable_ckpt: bool = False) -> None:
    """Offload ``model``'s saved activations to host memory during training forwards.

    ``strategy`` must be an FSDP strategy (``fsdp`` / ``fsdp2``), the only ones whose models live in this process;
    ``enable_ckpt`` says whether gradient checkpointing is on (accepted for verl's signature: both combine as is).
    """
    if strategy not in _STRATEGIES:
        raise ValueError(
            f"enable_activation_offloading: strategy={strategy!r} is not supported; activation "
            f"offload works with {list(_STRATEGIES)}"
        )
    enable_activation_offload(model)
