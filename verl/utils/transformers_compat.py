"""Differences between transformers releases that verl-style model code has to bridge (4.5x and 5.x).

Each helper answers one question in a way that works on either major version: which installed version this is,
which auto class loads image-text models (``AutoModelForVision2Seq`` is gone in 5.x), what shape a vision tower's
output has, and which state-dict keys are aliases of tied weights.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import MutableMapping
from typing import Any

from packaging import version

__all__ = [
    "is_transformers_version_in_range",
    "get_auto_model_for_vision2seq",
    "unpack_visual_output",
    "drop_tied_target_keys",
    "flash_attn_supports_top_left_mask",
]


def flash_attn_supports_top_left_mask() -> bool:
    """Whether the installed flash-attn aligns causal masks top-left (old releases); False when unknown."""
    try:
        from transformers.modeling_flash_attention_utils import flash_attn_supports_top_left_mask as supports
    except ImportError:
        return False
    return bool(supports())


@functools.cache
def is_transformers_version_in_range(min_version: str | None = None, max_version: str | None = None) -> bool:
    """Whether the installed transformers lies in ``[min_version, max_version]`` (either bound optional)."""
    try:
        installed = version.parse(importlib.metadata.version("transformers"))
    except importlib.metadata.PackageNotFoundError as err:
        raise ModuleNotFoundError("the transformers package is not installed") from err
    if min_version is not None and installed < version.parse(min_version):
        return False
    return max_version is None or installed <= version.parse(max_version)


@functools.cache
def get_auto_model_for_vision2seq() -> type:
    """``AutoModelForImageTextToText`` where it exists (its mapping is the wider one), else
    ``AutoModelForVision2Seq``."""
    import transformers

    cls = getattr(transformers, "AutoModelForImageTextToText", None)
    return cls if cls is not None else transformers.AutoModelForVision2Seq


def unpack_visual_output(visual_output: Any) -> tuple[Any, Any]:
    """``(embeddings, deepstack_features or None)`` from a vision tower's output: an output object (5.x, with
    ``pooler_output``), a tuple, or a bare tensor."""
    if hasattr(visual_output, "pooler_output"):
        return visual_output.pooler_output, getattr(visual_output, "deepstack_features", None)
    if isinstance(visual_output, tuple):
        return visual_output
    return visual_output, None


def drop_tied_target_keys(state_dict: MutableMapping[str, Any], model: Any, model_config: Any) -> None:
    """Remove alias keys of tied parameters (``lm_head.weight`` of a tied-embedding model) from ``state_dict``.

    A gathered state dict holds one independent tensor per key, so ``save_pretrained`` cannot see the tie and
    transformers 5 refuses to re-tie on load when both keys are saved. The first name of each shared parameter is
    kept; an alias is only dropped when that first name is in ``state_dict`` (otherwise the alias stays and becomes
    the kept name).
    """
    if not getattr(model_config, "tie_word_embeddings", False):
        return
    model.tie_weights()
    kept: dict[int, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        first = kept.setdefault(id(parameter), name)
        if first == name:
            continue
        if first in state_dict:
            state_dict.pop(name, None)
        else:
            kept[id(parameter)] = name
