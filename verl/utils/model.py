"""Hugging Face model helpers verl recipes import from ``verl.utils.model``: configs, generation configs, auto-class
choice, sizes, random masks for tests, LoRA target matching and multi-modal input batching.

Loading the models the workers train is :mod:`verl.workers.fsdp.model_loader`; this module holds the small,
stateless pieces around it. Megatron-specific names import, and raise ``MissingExtraError`` when called.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from verl.models.mcore._missing import megatron_function
from verl.utils.torch_functional import compute_position_id_with_mask

__all__ = [
    "LambdaLayer",
    "squeeze",
    "update_model_config",
    "get_huggingface_actor_config",
    "get_generation_config",
    "create_huggingface_actor",
    "create_huggingface_critic",
    "get_model_size",
    "print_model_size",
    "create_random_mask",
    "compute_position_id_with_mask",
    "convert_weight_keys",
    "check_exclude_modules",
    "check_target_modules",
    "get_hf_auto_model_class",
    "extract_multi_modal_inputs",
    "get_lora_rank_from_adapter",
    "CausalLMOutputForPPO",
    "get_parallel_model_from_config",
    "get_parallel_gptmodel_from_config",
    "load_megatron_model_weights",
    "load_megatron_gptmodel_weights",
    "load_mcore_dist_weights",
    "normalize_pp_vpp_params",
    "normalize_model_name",
]

logger = logging.getLogger(__name__)

# Multi-modal inputs whose last dim differs between rows (audio features): padded with zeros before concatenation.
_VARLEN_MULTI_MODAL_KEYS = frozenset({"input_features", "feature_attention_mask", "mm_token_type_ids"})


class LambdaLayer(nn.Module):
    """A module that applies ``fn`` (to put a plain function into an ``nn.Sequential``)."""

    def __init__(self, fn: Any):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def squeeze(x: torch.Tensor) -> torch.Tensor:
    """Drop the trailing size-1 dim (a value head's ``[..., 1]`` output)."""
    return torch.squeeze(x, dim=-1)


def update_model_config(module_config: Any, override_config_kwargs: Mapping[str, Any]) -> None:
    """Set ``override_config_kwargs`` on a Hugging Face config in place; nested mappings update sub-configs."""
    for key, value in override_config_kwargs.items():
        if isinstance(value, Mapping):
            update_model_config(getattr(module_config, key), value)
        else:
            setattr(module_config, key, value)


def get_huggingface_actor_config(
    model_name: str, override_config_kwargs: Mapping[str, Any] | None = None, trust_remote_code: bool = False
) -> Any:
    """``AutoConfig`` of ``model_name`` with ``override_config_kwargs`` applied."""
    from transformers import AutoConfig

    if override_config_kwargs is not None and not isinstance(override_config_kwargs, Mapping):
        raise TypeError(f"override_config_kwargs must be a mapping, got {type(override_config_kwargs).__name__}")
    config = AutoConfig.from_pretrained(model_name, trust_remote_code=trust_remote_code)
    update_model_config(config, override_config_kwargs or {})
    return config


def get_generation_config(model: str, trust_remote_code: bool = False) -> Any | None:
    """The model's ``generation_config.json``, else one derived from its ``config.json``, else None."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model)
    except OSError:
        pass
    try:
        return GenerationConfig.from_model_config(
            get_huggingface_actor_config(model, trust_remote_code=trust_remote_code)
        )
    except OSError:
        return None


def create_huggingface_actor(
    model_name: str,
    override_config_kwargs: Mapping[str, Any] | None = None,
    automodel_kwargs: Mapping[str, Any] | None = None,
) -> nn.Module:
    """A randomly initialised causal LM with ``model_name``'s (overridden) architecture (no weights are read)."""
    from transformers import AutoModelForCausalLM

    kwargs = dict(automodel_kwargs or {})
    config = get_huggingface_actor_config(
        model_name, override_config_kwargs, trust_remote_code=bool(kwargs.get("trust_remote_code", False))
    )
    return AutoModelForCausalLM.from_config(config, **kwargs)


def create_huggingface_critic(
    model_name: str,
    override_config_kwargs: Mapping[str, Any] | None = None,
    automodel_kwargs: Mapping[str, Any] | None = None,
) -> nn.Module:
    """:func:`create_huggingface_actor` whose ``lm_head`` is a scalar value head (``[B, S]`` outputs)."""
    model = create_huggingface_actor(model_name, override_config_kwargs, automodel_kwargs)
    dtype = dict(automodel_kwargs or {}).get("torch_dtype", torch.float32)
    model.lm_head = nn.Sequential(nn.Linear(model.config.hidden_size, 1, dtype=dtype), LambdaLayer(fn=squeeze))
    return model


_SCALES = {"B": 1e9, "M": 1e6, "K": 1e3, "": 1.0}


def get_model_size(model: nn.Module, scale: str = "auto") -> tuple[float, str]:
    """``(parameter count in scale, scale)``; ``auto`` picks B, M, K or none by magnitude."""
    count = sum(p.numel() for p in model.parameters())
    if scale == "auto":
        scale = next((name for name, size in _SCALES.items() if count > size), "")
    if scale not in _SCALES:
        raise ValueError(f"get_model_size: unknown scale {scale!r}; use one of {list(_SCALES)} or 'auto'")
    return count / _SCALES[scale], scale


def print_model_size(model: nn.Module, name: str | None = None) -> None:
    """Print ``<name> contains <n><scale> parameters``."""
    count, scale = get_model_size(model)
    print(f"{name or type(model).__name__} contains {count:.2f}{scale} parameters")


def create_random_mask(
    input_ids: torch.Tensor,
    max_ratio_of_valid_token: float,
    max_ratio_of_left_padding: float,
    min_ratio_of_valid_token: float = 0,
) -> torch.Tensor:
    """A random ``[B, S]`` attention mask for tests: per row a random left padding, then a random number of valid
    tokens (between the min and max ratios of ``S``, at least 1), then right padding. Uses numpy's global RNG."""
    if not 0 < max_ratio_of_valid_token <= 1.0:
        raise ValueError(f"max_ratio_of_valid_token must be in (0, 1], got {max_ratio_of_valid_token}")
    if not 0 <= max_ratio_of_left_padding < 1.0:
        raise ValueError(f"max_ratio_of_left_padding must be in [0, 1), got {max_ratio_of_left_padding}")
    if min_ratio_of_valid_token > max_ratio_of_valid_token:
        raise ValueError(
            f"min_ratio_of_valid_token={min_ratio_of_valid_token} exceeds "
            f"max_ratio_of_valid_token={max_ratio_of_valid_token}"
        )
    batch, length = input_ids.shape
    max_valid = int(length * max_ratio_of_valid_token)
    min_valid = max(1, int(length * min_ratio_of_valid_token))
    max_left = int(length * max_ratio_of_left_padding)
    if max_valid < 1 or max_valid + max_left > length:
        raise ValueError(
            f"a sequence of {length} tokens cannot hold {max_valid} valid tokens after up to {max_left} padding tokens"
        )
    positions = torch.arange(length)
    mask = torch.zeros_like(input_ids, dtype=torch.int64)
    for row in range(batch):
        left = int(np.random.randint(0, max_left + 1))
        valid = int(np.random.randint(min_valid, max(min_valid, max_valid) + 1))
        mask[row] = ((positions >= left) & (positions < left + valid)).to(torch.int64)
    return mask


def convert_weight_keys(state_dict: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    """Rename keys the model's loader renamed on the way in back to the checkpoint's names.

    transformers 4.5x models carry ``_checkpoint_conversion_mapping`` (checkpoint regex -> module name); the
    reverse mapping turns live module names into the names a checkpoint of that model uses. Models without it
    (transformers 5 reverts conversions in ``save_pretrained`` itself) are returned unchanged.
    """
    mapping = getattr(model, "_checkpoint_conversion_mapping", None)
    if not mapping:
        return state_dict
    reverse = [(live, re.sub(r"\(.*\)", "", checkpoint.lstrip("^"))) for checkpoint, live in mapping.items()]
    converted: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        for pattern, replacement in reverse:
            key, count = re.subn(pattern, replacement, key)
            if count:
                break
        converted[key] = value
    return converted


def check_exclude_modules(config: Any, key: str) -> bool:
    """Whether module name ``key`` is excluded by a PEFT config's ``exclude_modules`` (regex string, or names
    matched exactly or as a dotted suffix)."""
    excluded = getattr(config, "exclude_modules", None)
    if not excluded:
        return False
    if isinstance(excluded, str):
        return re.fullmatch(excluded, key) is not None
    return key in excluded or any(key.endswith(f".{name}") for name in excluded)


def _layer_index(key: str, patterns: Sequence[str] | str | None) -> int | None:
    if not patterns:
        match = re.match(r".*\.[^.]*\.(\d+)\.", key)
        return int(match.group(1)) if match else None
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        match = re.match(rf".*\.{pattern}\.(\d+)\.", key)
        if match:
            return int(match.group(1))
    return None


def check_target_modules(config: Any, key: str) -> bool:
    """Whether module name ``key`` is a LoRA target of a PEFT config, as PEFT decides it: ``target_modules`` as a
    regex string or a list of names (exact or dotted suffix), narrowed by ``layers_to_transform`` /
    ``layers_pattern`` when set."""
    targets = config.target_modules
    if isinstance(targets, str):
        return re.fullmatch(targets, key) is not None
    if key in targets:
        return True
    if not any(key.endswith(f".{name}") for name in targets):
        return False
    layers = getattr(config, "layers_to_transform", None)
    if layers is None or (isinstance(layers, list) and not layers):
        return True
    index = _layer_index(key, getattr(config, "layers_pattern", None))
    if index is None:
        return False
    return index == layers if isinstance(layers, int) else index in layers


_AUTO_CLASS_BY_SUFFIX = (
    ("ForCausalLM", "AutoModelForCausalLM"),
    ("ForVision2Seq", None),
    ("ForTokenClassification", "AutoModelForTokenClassification"),
    ("ForSequenceClassification", "AutoModelForSequenceClassification"),
)


def get_hf_auto_model_class(hf_config: Any) -> type:
    """The transformers auto class that builds ``hf_config``'s architecture.

    Remote-code models use the auto class their ``auto_map`` registers the architecture under; image-text models
    (by config type) use the image-text auto class; otherwise the architecture name's suffix decides, and
    ``AutoModel`` is the fallback.
    """
    import transformers

    from verl.utils.transformers_compat import get_auto_model_for_vision2seq

    image_text = get_auto_model_for_vision2seq()
    architectures = list(getattr(hf_config, "architectures", None) or [])
    architecture = architectures[0] if architectures else ""
    auto_map = getattr(hf_config, "auto_map", None) or {}
    for auto_name, target in auto_map.items():
        if architecture and architecture in str(target):
            if auto_name in ("AutoModelForVision2Seq", "AutoModelForImageTextToText"):
                return image_text
            if auto_name == "AutoModelForCausalLM":
                return transformers.AutoModelForCausalLM
            return transformers.AutoModel
    if type(hf_config) in image_text._model_mapping.keys():
        return image_text
    for suffix, auto_name in _AUTO_CLASS_BY_SUFFIX:
        if suffix in architecture:
            return image_text if auto_name is None else getattr(transformers, auto_name)
    return transformers.AutoModel


def _pad_last_dim_and_cat(values: list[torch.Tensor], key: str) -> torch.Tensor:
    shapes = ", ".join(str(tuple(value.shape)) for value in values)
    if values[0].dim() < 2 or any(v.dim() != values[0].dim() or v.shape[1:-1] != values[0].shape[1:-1] for v in values):
        raise RuntimeError(f"multi-modal input {key!r}: cannot pad rows of shapes {shapes} to one length")
    longest = max(value.shape[-1] for value in values)
    padded = [torch.nn.functional.pad(value, (0, longest - value.shape[-1])) for value in values]
    return torch.cat(padded, dim=0)


def extract_multi_modal_inputs(
    batch_data: Sequence[Any], indices: Sequence[int] | None = None
) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """Merge per-row multi-modal model inputs (dicts of tensors, or ``NonTensorData`` holding them) into one batch.

    Rows that are None (text-only rows in a mixed batch) are skipped; ``indices`` selects rows (out-of-range ones
    ignored). Each key's tensors are concatenated along dim 0; variable-length audio keys are zero-padded on the
    last dim first; with MiniCPM-style ``image_bound`` rows every key stays a list.
    """
    rows = list(batch_data) if indices is None else [batch_data[i] for i in indices if i < len(batch_data)]
    collected: dict[str, list[torch.Tensor]] = {}
    keep_lists = False
    for row in rows:
        row = getattr(row, "data", row) if not isinstance(row, Mapping) else row
        if row is None:
            continue
        keep_lists = keep_lists or "image_bound" in row
        for key, value in row.items():
            if value is not None:
                collected.setdefault(key, []).append(value)
    merged: dict[str, torch.Tensor | list[torch.Tensor]] = {}
    for key, values in collected.items():
        if keep_lists:
            merged[key] = values
        elif key in _VARLEN_MULTI_MODAL_KEYS:
            merged[key] = _pad_last_dim_and_cat(values, key)
        else:
            try:
                merged[key] = torch.cat(values, dim=0)
            except RuntimeError as err:
                shapes = ", ".join(str(tuple(value.shape)) for value in values)
                raise RuntimeError(f"multi-modal input {key!r}: cannot concatenate rows of shapes {shapes}") from err
    return merged


def get_lora_rank_from_adapter(adapter_path: str | os.PathLike) -> int:
    """The LoRA rank ``r`` of a saved PEFT adapter folder (from its ``adapter_config.json``)."""
    folder = os.path.abspath(os.path.expanduser(str(adapter_path)))
    config_path = os.path.join(folder, "adapter_config.json")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"LoRA adapter folder {folder!r} does not exist")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{folder!r} has no adapter_config.json")
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_path}: invalid JSON ({err})") from err
    if "r" not in config:
        raise ValueError(f"{config_path}: no LoRA rank 'r'")
    return int(config["r"])


@dataclass
class CausalLMOutputForPPO(CausalLMOutputWithPast):
    """A causal LM output that also carries the per-token log-probs and entropy of fused forward kernels."""

    log_probs: torch.FloatTensor | None = None
    entropy: torch.FloatTensor | None = None


get_parallel_model_from_config = megatron_function("get_parallel_model_from_config", __name__)
get_parallel_gptmodel_from_config = megatron_function("get_parallel_gptmodel_from_config", __name__)
load_megatron_model_weights = megatron_function("load_megatron_model_weights", __name__)
load_megatron_gptmodel_weights = megatron_function("load_megatron_gptmodel_weights", __name__)
load_mcore_dist_weights = megatron_function("load_mcore_dist_weights", __name__)
normalize_pp_vpp_params = megatron_function("normalize_pp_vpp_params", __name__)
normalize_model_name = megatron_function("normalize_model_name", __name__)
