"""verl 0.9.1's ``python -m verl.trainer.sft_trainer`` config (``sft_trainer_engine.yaml``) as an :class:`SFTConfig`.

That trainer always reads whole conversations (``data.messages_key``), shards with an ``engine`` group and optimizes
with an ``optim`` group; here the same keys drive :class:`~verl.trainer.sft.trainer.SFTTrainer` in multi-turn mode,
saving verl-layout ``global_step_{k}`` checkpoints and resuming as verl does (``trainer.resume_mode=auto``).
Knobs that only change speed or memory (dynamic batch sizes, padding mode, offload, torch.compile, ...) are accepted
and ignored with a warning; values that ask for something this trainer cannot do (sequence parallelism, the Megatron
engine, another optimizer) fail naming the key.
"""

from __future__ import annotations

from typing import Any

from verl.base_config import ConfigError
from verl.trainer.sft.config import SFTConfig, build_sft_config
from verl.trainer.sft.key_reader import KeyReader

__all__ = ["MEGATRON_MESSAGE", "engine_tree_to_sft_config", "read_optim", "read_trainer"]

MEGATRON_MESSAGE = (
    "the Megatron engine is not part of this package, which trains with FSDP2 only (pip install verl[megatron] "
    "installs megatron-core, but no Megatron trainer ships here); use engine=fsdp optim=fsdp"
)
_SPEED_ONLY = "speed/memory only"


def _thinking_default(value: Any) -> bool | None:
    if value in (None, "none", "None", "null"):
        return None
    if isinstance(value, bool):
        return value
    raise ConfigError(f"must be true, false or none, got {value!r}", key="data.enable_thinking_default")


def _read_data(keys: KeyReader) -> dict[str, Any]:
    data = {
        "train_files": keys.take("data.train_files"),
        "val_files": keys.take("data.val_files", None),
        "train_batch_size": keys.take("data.train_batch_size"),
        "micro_batch_size_per_gpu": keys.take("data.micro_batch_size_per_gpu"),
        "max_length": keys.take("data.max_length", 1024),
        "truncation": keys.take("data.truncation", "error"),
        "train_max_samples": keys.take("data.train_max_samples", -1),
        "val_max_samples": keys.take("data.val_max_samples", -1),
        "apply_chat_template_kwargs": keys.take("data.apply_chat_template_kwargs", None) or {},
        "custom_cls": keys.take("data.custom_cls", None) or {},
        "multiturn": {
            "enable": True,
            "messages_key": keys.take("data.messages_key", "messages"),
            "tools_key": keys.take("data.tools_key", "tools"),
            "enable_thinking_key": keys.take("data.enable_thinking_key", "enable_thinking"),
            "enable_thinking_default": _thinking_default(keys.take("data.enable_thinking_default", None)),
        },
    }
    # Rows are right-padded and each micro-batch is cut to its longest row: the loss equals verl's packed one.
    keys.refuse("data.pad_mode", ("no_padding", "right", "left_right"), "must be no_padding, right or left_right")
    keys.ignore("data.use_dynamic_bsz", True, "micro-batches have micro_batch_size_per_gpu rows")
    keys.ignore("data.max_token_len_per_gpu", 8192, "micro-batches have micro_batch_size_per_gpu rows")
    keys.ignore("data.balance_dp_token", False, _SPEED_ONLY)
    keys.ignore("data.use_shm", False, "files are read in place")
    keys.ignore("data.num_workers", 8, "rows are tokenized in the training process")
    # This trainer never compares the turn-by-turn tokens with a whole-conversation render, so there is no mismatch
    # to ignore.
    keys.take("data.ignore_input_ids_mismatch", False)
    return data


def read_optim(keys: KeyReader, prefix: str = "optim") -> dict[str, Any]:
    """The ``optim`` group (``optim/fsdp.yaml``) as :class:`~verl.workers.config.OptimizerConfig` fields."""
    if keys.has(f"{prefix}.lr_decay_style") or keys.has(f"{prefix}.lr_warmup_init"):
        raise ConfigError(f"is Megatron's optimizer group: {MEGATRON_MESSAGE}", key=prefix)
    name = keys.take(f"{prefix}.optimizer", "AdamW")
    impl = keys.take(f"{prefix}.optimizer_impl", "torch.optim")
    if str(name).lower() not in ("adamw", "adam_w") or impl != "torch.optim":
        raise ConfigError(f"is {impl}.{name}: this trainer uses torch.optim.AdamW", key=f"{prefix}.optimizer")
    override = keys.take(f"{prefix}.override_optimizer_config", None)
    if override:
        raise ConfigError(
            f"is {override!r}: AdamW takes lr, betas and weight_decay from the optim group only",
            key=f"{prefix}.override_optimizer_config",
        )
    scheduler = keys.take(f"{prefix}.lr_scheduler_type", "constant")
    legacy_style = keys.take(f"{prefix}.warmup_style", None)  # verl's deprecated name of lr_scheduler_type
    keys.ignore(f"{prefix}.zero_indexed_step", True, "the schedule counts steps from 0")
    keys.take(f"{prefix}.total_training_steps", -1)  # the trainer sets it from the data size
    clip_grad = keys.take(f"{prefix}.clip_grad", 1.0)
    grad_clip = keys.take(f"{prefix}.grad_clip", None)  # verl's deprecated name of clip_grad: sets it when given
    optim = {
        "optimizer": "AdamW",
        "lr": keys.take(f"{prefix}.lr"),
        "lr_warmup_steps": keys.take(f"{prefix}.lr_warmup_steps", -1),
        "lr_warmup_steps_ratio": keys.take(f"{prefix}.lr_warmup_steps_ratio", 0.0),
        "weight_decay": keys.take(f"{prefix}.weight_decay", 0.01),
        "betas": keys.take(f"{prefix}.betas", [0.9, 0.999]),
        "clip_grad": clip_grad if grad_clip is None else grad_clip,
        "lr_scheduler_type": legacy_style or scheduler,
        "min_lr_ratio": keys.take(f"{prefix}.min_lr_ratio", 0.0),
        "num_cycles": keys.take(f"{prefix}.num_cycles", 0.5),
    }
    keys.take(prefix, None)  # the rest of the shared optim group (_target_, ...) has no SFT meaning
    return optim


def _read_engine(keys: KeyReader) -> str:
    """Check the ``engine`` group; returns the trainer's ``mixed_precision`` for ``engine.dtype``."""
    strategy = keys.take("engine.strategy", "fsdp")
    if strategy == "megatron":
        raise ConfigError(MEGATRON_MESSAGE, key="engine")
    if strategy not in ("fsdp", "fsdp2"):
        raise ConfigError(f"is {strategy!r}: this trainer shards with FSDP2 (fsdp or fsdp2)", key="engine.strategy")
    keys.refuse(
        "engine.ulysses_sequence_parallel_size",
        (1,),
        "sequence parallelism is not implemented here; use 1 (each rank holds whole sequences)",
    )
    fsdp_size = keys.take("engine.fsdp_size", -1)
    world = _world_size()
    if fsdp_size not in (-1, world):
        raise ConfigError(
            f"is {fsdp_size} but {world} process(es) run: this trainer shards over all of them (use -1)",
            key="engine.fsdp_size",
        )
    dtype = keys.take("engine.dtype", "bfloat16")
    precision = {"bfloat16": "auto", "bf16": "auto", "float32": "none", "fp32": "none"}.get(dtype)
    if precision is None:
        raise ConfigError(f"is {dtype!r}: mixed precision runs in bfloat16 (or float32 for none)", key="engine.dtype")
    keys.ignore("engine.model_dtype", "fp32", "master weights are always float32 here")
    for name, default in (
        ("param_offload", False),
        ("optimizer_offload", False),
        ("offload_policy", False),
        ("reshard_after_forward", True),
        ("forward_prefetch", False),
        ("use_orig_params", False),
        ("use_torch_compile", True),
        ("entropy_from_logits_with_chunking", False),
        ("entropy_checkpointing", False),
        ("use_no_sync_for_gradient_accumulation", False),
        ("pad_to_length", False),
        ("forward_only", False),
        ("full_determinism", False),
    ):
        keys.ignore(f"engine.{name}", default, _SPEED_ONLY)
    qat = keys.take("engine.qat", None) or {}
    if qat.get("enable"):
        raise ConfigError("quantization-aware training is not implemented here", key="engine.qat.enable")
    keys.take("engine")  # the rest of the shared engine group (wrap policy, seeds, ...) does not apply to SFT
    return precision


def read_trainer(keys: KeyReader, mixed_precision: str) -> dict[str, Any]:
    """The ``trainer`` group keys both verl SFT CLIs share."""
    trainer = {
        "default_local_dir": keys.take("trainer.default_local_dir"),
        "default_hdfs_dir": keys.take("trainer.default_hdfs_dir", None),
        "project_name": keys.take("trainer.project_name"),
        "experiment_name": keys.take("trainer.experiment_name"),
        "total_epochs": keys.take("trainer.total_epochs", 1),
        "total_training_steps": keys.take("trainer.total_training_steps", None),
        "logger": list(keys.take("trainer.logger", ["console"])),
        "seed": keys.take("trainer.seed", 1),
        "save_freq": keys.take("trainer.save_freq", -1),
        "test_freq": keys.take("trainer.test_freq", -1),
        "max_ckpt_to_keep": keys.take("trainer.max_ckpt_to_keep", None),
        "resume_mode": keys.take("trainer.resume_mode", "auto"),
        "resume_from_path": keys.take("trainer.resume_from_path", None),
        "device": keys.take("trainer.device", "auto"),
        "mixed_precision": mixed_precision,
        # verl checkpoints the last step as global_step_{k}; python -m verl.model_merger turns it into an HF folder
        "final_export": False,
    }
    if trainer["device"] == "npu":
        raise ConfigError("is 'npu': Ascend NPUs are not supported here; use cuda, cpu or auto", key="trainer.device")
    # verl reads the group size from torchrun, as this trainer does; these keys only size its Ray variant
    keys.take("trainer.nnodes", None)
    keys.take("trainer.n_gpus_per_node", None)
    return trainer


def _world_size() -> int:
    import os

    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def engine_tree_to_sft_config(tree: dict[str, Any]) -> SFTConfig:
    """Validate a composed ``sft_trainer_engine`` tree (plain dict, interpolations resolved) into an SFTConfig."""
    keys = KeyReader({k: v for k, v in tree.items() if k != "hydra"})
    data = _read_data(keys)
    precision = _read_engine(keys)
    optim = read_optim(keys)
    trainer = read_trainer(keys, precision)
    keys.ignore("trainer.balance_batch", True, _SPEED_ONLY)
    keys.ignore("trainer.profile_interval", [-1, -1], "profiling is not wired into this trainer")
    keys.take("profiler", None)
    model = keys.take("model")
    checkpoint = {
        "save_contents": list(keys.take("checkpoint.save_contents", ["model", "optimizer", "extra"])),
        "load_contents": keys.take("checkpoint.load_contents", None),
        "async_save": keys.take("checkpoint.async_save", False),
    }
    keys.take("checkpoint._target_", None)
    keys.finish("verl.trainer.sft_trainer")
    return build_sft_config(
        {"data": data, "model": model, "optim": optim, "checkpoint": checkpoint, "trainer": trainer}
    )
