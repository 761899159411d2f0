"""``apply_monkey_patch``: verl's entry point for patching a Hugging Face model before training it.

verl patches model classes for Ulysses sequence parallelism, fused log-prob kernels, tiled MLPs and prefix
grouping. Here the actor does what the patches were for without touching the model classes: padding removal and the
fused output head are applied by the actor's forward (:mod:`verl.workers.actor.token_forward`,
:mod:`verl.workers.actor.fused_head`). So this function checks that the model can serve the requested features,
and refuses the ones this package does not have, naming them; it changes nothing on the model.
"""

from __future__ import annotations

from torch import nn

__all__ = ["apply_monkey_patch"]


def apply_monkey_patch(
    model: nn.Module,
    ulysses_sp_size: int = 1,
    use_remove_padding: bool = True,
    use_fused_kernels: bool = False,
    fused_kernels_backend: str | None = None,
    use_prefix_grouper: bool = False,
    use_tiled_mlp: bool = False,
    tiled_mlp_shards: int = 4,
) -> None:
    """Check ``model`` against the requested features (verl's signature); raise for what cannot be served.

    Raises:
        NotImplementedError: ``ulysses_sp_size > 1``, ``use_prefix_grouper`` or ``use_tiled_mlp`` (not in this
            build), or a ``fused_kernels_backend`` other than ``torch``.
        ValueError: padding removal or the fused head cannot serve this model (the message names the key).
    """
    if int(ulysses_sp_size) > 1:
        raise NotImplementedError(
            f"apply_monkey_patch: ulysses_sp_size={ulysses_sp_size}: Ulysses sequence "
            "parallelism is not part of this build; set ulysses_sequence_parallel_size=1"
        )
    if use_prefix_grouper:
        raise NotImplementedError("apply_monkey_patch: use_prefix_grouper is not part of this build")
    if use_tiled_mlp:
        raise NotImplementedError("apply_monkey_patch: use_tiled_mlp is not part of this build")
    config = getattr(model, "config", None)
    if use_remove_padding and config is not None and getattr(config, "model_type", None):
        from verl.models.registry import check_model_support_rmpad

        check_model_support_rmpad(config.model_type)
    if use_fused_kernels:
        if fused_kernels_backend not in (None, "torch"):
            raise NotImplementedError(
                f"apply_monkey_patch: fused_kernels_backend={fused_kernels_backend!r} is not "
                "available; the fused head here is torch code (use 'torch' or leave it unset)"
            )
        from verl.workers.actor.fused_head import check_fused_head

        check_fused_head(model)
