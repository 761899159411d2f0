"""Load a causal-LM checkpoint as a critic: the same backbone with a one-output head per token.

Transformers' ``AutoModelForTokenClassification`` with ``num_labels=1`` is exactly
that for Llama, Qwen2 and most decoder families: the backbone weights of a
``*ForCausalLM`` checkpoint load by name (both live under ``model.``), the
language-model head is dropped and a fresh linear ``score`` head (hidden -> 1)
is initialised by the model's own initialiser. No value-head wrapper class
is needed, and the result saves and reloads with ``from_pretrained``.
Dropout before the head is switched off: the critic's values at rollout time
and at update time must come from the same function.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel

__all__ = ["load_value_model"]

logger = logging.getLogger(__name__)


def load_value_model(
    path: str | Path,
    *,
    torch_dtype: torch.dtype | str | None = None,
    trust_remote_code: bool = False,
    override_config: dict[str, Any] | None = None,
    attn_implementation: str | None = None,
) -> PreTrainedModel:
    """The model at ``path`` with a scalar value head; its output ``.logits`` is [B, S, 1]."""
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    for key, value in (override_config or {}).items():
        setattr(config, key, value)
    config.num_labels = 1
    config.classifier_dropout = 0.0
    kwargs: dict[str, Any] = {"config": config, "trust_remote_code": trust_remote_code}
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForTokenClassification.from_pretrained(path, **kwargs)
    except ValueError as err:
        raise ValueError(
            f"cannot load {path} as a critic: model type {config.model_type!r} has no token-classification class "
            f"in transformers ({err})"
        ) from err
    logger.info("loaded critic from %s with a fresh value head 'score' (hidden -> 1)", path)
    return model
