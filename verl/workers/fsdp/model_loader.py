"""Load the Hugging Face model an FSDP worker trains or scores with, exactly as a user would: ``from_pretrained``.

Every failure that comes from a wrong ``model.path`` (missing folder, no config.json, no weights) is reported here,
naming the key and the path, instead of surfacing later as an opaque transformers error inside a Ray actor.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from verl.workers.config.model import HFModelConfig

__all__ = [
    "model_config_of",
    "parse_dtype",
    "resolve_model_path",
    "load_tokenizer",
    "load_causal_lm",
    "load_critic_model",
    "apply_lora",
    "is_lora_model",
    "export_config",
    "hf_weight_names",
]

logger = logging.getLogger(__name__)

_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
}
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def parse_dtype(name: str | torch.dtype, key: str = "fsdp_config.model_dtype") -> torch.dtype:
    """A dtype name from a config (fp32, bf16, float16, ...) as a torch dtype; unknown names name the key."""
    if isinstance(name, torch.dtype):
        return name
    dtype = _DTYPES.get(str(name).lower().removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"{key}={name!r} is not a known dtype; use one of {sorted(_DTYPES)}")
    return dtype


def model_config_of(model_config: Any, group: str = "model") -> HFModelConfig:
    """``model_config`` as an ``HFModelConfig``: itself, or built from a DictConfig / dict (a recipe's own keys
    kept in ``_extra``); ``group`` names it in errors. Every loader here takes either."""
    from verl.utils.config_builder import as_config
    from verl.workers.config.model import HFModelConfig

    return as_config(model_config, HFModelConfig, group)


def resolve_model_path(model_config: Any, key: str = "model.path") -> str:
    """The local checkpoint folder of ``model_config.path``, validated; the built-in tiny model is built on demand.
    With ``use_shm`` it is the folder's copy in shared memory (:mod:`verl.utils.shm`), made by the first caller."""
    from verl.utils.shm import maybe_shm_copy
    from verl.workers.config.model import BUILTIN_TINY_MODEL

    model_config = model_config_of(model_config, key.rsplit(".", 1)[0])
    raw = model_config.path
    use_shm = model_config.use_shm
    shm_key = key.rsplit(".", 1)[0] + ".use_shm"
    if raw == BUILTIN_TINY_MODEL:
        from verl.utils.tiny_model import tiny_model_path

        return maybe_shm_copy(tiny_model_path(), use_shm, shm_key)
    if not raw:
        raise ValueError(f"{key} is empty; set it to a Hugging Face checkpoint folder")
    path = Path(str(raw)).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{key}={raw!r}: no such folder (this machine cannot download models from a hub)")
    if not path.is_dir():
        raise NotADirectoryError(f"{key}={raw!r} is a file; it must be a Hugging Face checkpoint folder")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{key}={raw!r} is not a Hugging Face checkpoint: it has no config.json")
    has_weights = any((path / name).is_file() for name in _WEIGHT_FILES) or any(path.glob("*.safetensors"))
    if not has_weights:
        raise FileNotFoundError(
            f"{key}={raw!r} is not a Hugging Face checkpoint: it has config.json but no weights "
            f"(expected one of {list(_WEIGHT_FILES)})"
        )
    return maybe_shm_copy(path, use_shm, shm_key)


def _import_external_lib(model_config: HFModelConfig) -> None:
    name = model_config.external_lib
    if name:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ImportError(f"model.external_lib={name!r} cannot be imported: {err}") from err


def load_tokenizer(model_config: Any, model_path: str) -> Any:
    """The tokenizer of ``model.tokenizer_path`` (default: the model folder), with ``custom_chat_template`` applied."""
    from transformers import AutoTokenizer

    from verl.workers.config.model import BUILTIN_TINY_MODEL

    model_config = model_config_of(model_config)
    tokenizer_path = model_config.tokenizer_path or model_path
    if tokenizer_path == BUILTIN_TINY_MODEL:
        tokenizer_path = model_path
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=model_config.trust_remote_code)
    template = model_config.custom_chat_template
    if template:
        tokenizer.chat_template = template
    return tokenizer


def _hf_config(model_config: HFModelConfig, model_path: str) -> Any:
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(
        model_config.hf_config_path or model_path, trust_remote_code=model_config.trust_remote_code
    )
    for name, value in dict(model_config.override_config or {}).items():
        if name == "attn_implementation":
            continue
        setattr(hf_config, name, value)
    return hf_config


def _enable_memory_savers(model: nn.Module, model_config: HFModelConfig) -> None:
    """``model.enable_gradient_checkpointing`` and ``model.enable_activation_offload`` of a trainable model."""
    if model_config.enable_gradient_checkpointing:
        # Non-reentrant checkpointing works with frozen inputs (LoRA) and with FSDP2's hooks.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if model_config.enable_activation_offload:
        from verl.workers.fsdp.activation_offload import enable_activation_offload

        enable_activation_offload(model)


def load_causal_lm(model_config: Any, model_path: str, dtype: torch.dtype, *, trainable: bool = True) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(model.path)`` with the config's overrides; LoRA when trainable and
    ``model.lora_rank > 0``; gradient checkpointing and activation offload when trainable and enabled; Liger's
    kernels with ``model.use_liger``."""
    from transformers import AutoModelForCausalLM

    model_config = model_config_of(model_config)
    _import_external_lib(model_config)
    hf_config = _hf_config(model_config, model_path)
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        config=hf_config,
        dtype=dtype,
        attn_implementation=model_config.attn_implementation,
        trust_remote_code=model_config.trust_remote_code,
    )
    if model_config.use_liger:
        from verl.workers.fsdp.liger import apply_liger

        apply_liger(model)
    if not trainable:
        model.requires_grad_(False)
        return model.eval()
    _enable_memory_savers(model, model_config)
    if model_config.lora_rank > 0:
        model = apply_lora(model, model_config)
    return model


def load_critic_model(model_config: Any, model_path: str, dtype: torch.dtype) -> nn.Module:
    """The causal-LM checkpoint as a value model (one output per token), see ``verl.workers.critic.value_model``."""
    from verl.workers.critic.value_model import load_value_model

    model_config = model_config_of(model_config, "critic.model")
    _import_external_lib(model_config)
    overrides = {k: v for k, v in dict(model_config.override_config or {}).items() if k != "attn_implementation"}
    model = load_value_model(
        model_path,
        torch_dtype=dtype,
        trust_remote_code=model_config.trust_remote_code,
        override_config=overrides,
        attn_implementation=model_config.attn_implementation,
    )
    _enable_memory_savers(model, model_config)
    return model


def apply_lora(model: nn.Module, model_config: Any) -> nn.Module:
    """Wrap ``model`` with PEFT LoRA adapters; only adapter weights stay trainable."""
    from peft import LoraConfig, PeftModel, get_peft_model

    model_config = model_config_of(model_config)
    adapter_path = model_config.lora_adapter_path
    if adapter_path:
        if not Path(adapter_path).is_dir():
            raise FileNotFoundError(f"model.lora_adapter_path={adapter_path!r}: no such folder")
        return PeftModel.from_pretrained(model, adapter_path, is_trainable=True)
    target_modules = model_config.target_modules
    if not isinstance(target_modules, str):
        target_modules = list(target_modules)
    lora_config = LoraConfig(
        task_type="CAUSAL_LM",
        r=int(model_config.lora_rank),
        lora_alpha=int(model_config.lora_alpha),
        target_modules=target_modules,
        exclude_modules=model_config.exclude_modules,
        bias="none",
    )
    return get_peft_model(model, lora_config)


def is_lora_model(model: nn.Module) -> bool:
    """True when ``model`` (possibly FSDP-wrapped) is a PEFT model."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def export_config(model: nn.Module) -> Any:
    """The transformers config to save next to exported weights: the loaded model's own (overrides included),
    naming its class so ``from_pretrained`` of the export builds the same architecture. Call before wrapping."""
    import copy

    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    config = copy.deepcopy(base.config)
    config.architectures = [type(base).__name__]
    return config


def hf_weight_names(hf_config: Any, trust_remote_code: bool = False) -> frozenset[str] | None:
    """The state-dict names of the causal LM ``hf_config`` describes, built on the meta device (no memory, no
    weights): the names a rollout engine loads. ``None`` when transformers cannot build the architecture."""
    from transformers import AutoModelForCausalLM, PretrainedConfig

    if not isinstance(hf_config, PretrainedConfig):
        return None
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001 - best effort: without the names, no weight is held back
        logger.warning("cannot list the weights of %s: %s", type(hf_config).__name__, err)
        return None
    return frozenset(model.state_dict().keys())
