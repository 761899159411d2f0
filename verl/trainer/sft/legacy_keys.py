"""verl's older ``python -m verl.trainer.fsdp_sft_trainer`` config (``sft_trainer_legacy.yaml``) as an SFTConfig.

Its keys differ from the newer CLI: the model is ``model.partial_pretrain``, single-turn rows name their text with
``data.prompt_key``/``data.response_key`` plus optional ``data.prompt_dict_keys``/``data.response_dict_keys`` (a field
inside a struct column), multi-turn rows sit under ``data.multiturn.*``, the schedule is ``optim.lr_scheduler`` and
checkpoints are configured under ``trainer.checkpoint``. The run itself is the same trainer and the same verl-layout
``global_step_{k}`` checkpoints as ``verl.trainer.sft_trainer``.
"""

from __future__ import annotations

from typing import Any

from verl.base_config import ConfigError
from verl.trainer.sft.config import SFTConfig, build_sft_config
from verl.trainer.sft.engine_keys import read_trainer
from verl.trainer.sft.key_reader import KeyReader

__all__ = ["legacy_tree_to_sft_config"]

_SPEED_ONLY = "speed/memory only"


def _dotted(keys: KeyReader, column_key: str, fields_key: str) -> str:
    """``prompt_key=extra_info`` + ``prompt_dict_keys=[question]`` -> ``extra_info.question``."""
    column = keys.take(column_key)
    fields = keys.take(fields_key, None)
    if not fields:
        return column
    fields = [fields] if isinstance(fields, str) else list(fields)
    if len(fields) != 1:
        raise ConfigError(f"is {fields}: name exactly one field of the {column!r} struct", key=fields_key)
    return f"{column}.{fields[0]}"


def _read_data(keys: KeyReader) -> tuple[dict[str, Any], str | None]:
    if keys.take("data.micro_batch_size", None) is not None:
        raise ConfigError(
            "is deprecated in verl and not read here; set data.micro_batch_size_per_gpu", key="data.micro_batch_size"
        )
    data = {
        "train_files": keys.take("data.train_files"),
        "val_files": keys.take("data.val_files", None),
        "train_batch_size": keys.take("data.train_batch_size"),
        "micro_batch_size_per_gpu": keys.take("data.micro_batch_size_per_gpu"),
        "max_length": keys.take("data.max_length", 1024),
        "truncation": keys.take("data.truncation", "error"),
        "train_max_samples": keys.take("data.train_max_samples", -1),
        "val_max_samples": keys.take("data.val_max_samples", -1),
        "prompt_key": _dotted(keys, "data.prompt_key", "data.prompt_dict_keys"),
        "response_key": _dotted(keys, "data.response_key", "data.response_dict_keys"),
        "apply_chat_template_kwargs": keys.take("data.apply_chat_template_kwargs", None) or {},
        "custom_cls": keys.take("data.custom_cls", None) or {},
        "multiturn": {
            "enable": keys.take("data.multiturn.enable", False),
            "messages_key": keys.take("data.multiturn.messages_key", "messages"),
            "tools_key": keys.take("data.multiturn.tools_key", "tools"),
            "enable_thinking_key": keys.take("data.multiturn.enable_thinking_key", "enable_thinking"),
        },
    }
    keys.ignore("data.balance_dp_token", False, _SPEED_ONLY)
    keys.ignore("data.use_shm", False, "files are read in place")
    keys.take("data.pad_mode", None)
    # verl refused data.chat_template; here it is the chat template the tokenizer uses
    return data, keys.take("data.chat_template", None)


def _read_model(keys: KeyReader, chat_template: str | None) -> dict[str, Any]:
    strategy = keys.take("model.strategy", "fsdp2")
    if strategy not in ("fsdp", "fsdp2"):
        raise ConfigError(f"is {strategy!r}: this trainer shards with FSDP2 (fsdp or fsdp2)", key="model.strategy")
    keys.ignore("model.fsdp_config.model_dtype", "fp32", "master weights are always float32 here")
    keys.ignore("model.fsdp_config.cpu_offload", False, _SPEED_ONLY)
    keys.ignore("model.fsdp_config.offload_params", False, _SPEED_ONLY)
    keys.take("model.fsdp_config.wrap_policy", None)
    keys.ignore("model.use_shm", False, "the checkpoint is read in place")
    keys.ignore("model.use_liger", False, "Liger kernels are used by main_ppo's workers only")
    return {
        "path": keys.take("model.partial_pretrain"),
        "external_lib": keys.take("model.external_lib", None),
        "enable_gradient_checkpointing": keys.take("model.enable_gradient_checkpointing", False),
        "trust_remote_code": keys.take("model.trust_remote_code", False),
        "lora_rank": keys.take("model.lora_rank", 0),
        "lora_alpha": keys.take("model.lora_alpha", 16),
        "target_modules": keys.take("model.target_modules", "all-linear"),
        "custom_chat_template": chat_template,
    }


def _read_optim(keys: KeyReader) -> dict[str, Any]:
    scheduler = keys.take("optim.lr_scheduler", "cosine")
    if scheduler not in ("cosine", "constant"):
        raise ConfigError(f"is {scheduler!r}: this trainer schedules cosine or constant", key="optim.lr_scheduler")
    ratio = keys.take("optim.lr_warmup_steps_ratio", None)
    older = keys.take("optim.warmup_steps_ratio", None)  # verl's first name of the same key
    return {
        "lr": keys.take("optim.lr"),
        "betas": keys.take("optim.betas", [0.9, 0.95]),
        "weight_decay": keys.take("optim.weight_decay", 0.01),
        "lr_warmup_steps_ratio": ratio if ratio is not None else (older if older is not None else 0.0),
        "clip_grad": keys.take("optim.clip_grad", 1.0),
        "lr_scheduler_type": scheduler,
    }


def legacy_tree_to_sft_config(tree: dict[str, Any]) -> SFTConfig:
    """Validate a composed ``sft_trainer_legacy`` tree (plain dict, interpolations resolved) into an SFTConfig."""
    keys = KeyReader({k: v for k, v in tree.items() if k != "hydra"})
    data, chat_template = _read_data(keys)
    model = _read_model(keys, chat_template)
    optim = _read_optim(keys)
    keys.refuse(
        "ulysses_sequence_parallel_size",
        (1,),
        "sequence parallelism is not implemented here; use 1 (each rank holds whole sequences)",
    )
    keys.ignore("use_remove_padding", False, "each micro-batch is cut to its longest row instead")
    trainer = read_trainer(keys, "auto")
    checkpoint = {
        "save_contents": list(keys.take("trainer.checkpoint.save_contents", ["model", "optimizer", "extra"])),
        "load_contents": keys.take("trainer.checkpoint.load_contents", None),
    }
    keys.finish("verl.trainer.fsdp_sft_trainer")
    return build_sft_config(
        {"data": data, "model": model, "optim": optim, "checkpoint": checkpoint, "trainer": trainer}
    )
