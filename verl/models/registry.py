"""Which Hugging Face architectures padding removal (``model.use_remove_padding``) serves.

Padding removal packs a micro-batch into one row and lets transformers find the sequence boundaries from
``position_ids`` that restart at 0 (:mod:`verl.workers.actor.token_forward`). That works for any decoder-only text
model transformers knows; it does not for multimodal models whose rotary embedding takes 3-D (mRoPE) positions,
which this package's actor does not build.
"""

from __future__ import annotations

__all__ = ["MROPE_MODEL_TYPES", "check_model_support_rmpad"]

# model types whose position ids are 3-D (temporal, height, width): packing by 1-D position restarts is wrong
MROPE_MODEL_TYPES = frozenset(
    {
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen2_5_omni",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_omni_moe",
        "glm4v",
        "glm4v_moe",
    }
)


def check_model_support_rmpad(model_type: str) -> None:
    """Raise ``ValueError`` unless padding removal can serve ``model_type`` (a ``config.model_type``)."""
    if not isinstance(model_type, str) or not model_type:
        raise TypeError(f"check_model_support_rmpad: model_type must be a non-empty str, got {model_type!r}")
    if model_type in MROPE_MODEL_TYPES:
        raise ValueError(
            f"model type {model_type!r} uses multimodal (3-D) rotary positions, which padding removal "
            "does not support here; set model.use_remove_padding=false"
        )
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ValueError(
            f"model type {model_type!r} is not a transformers architecture, so padding removal cannot "
            "be checked for it; set model.use_remove_padding=false (or use a known architecture)"
        )
