"""Config keys that verl accepts (so that existing scripts keep parsing) but that change nothing in this build.

A user who sets one of them to something other than its default expects an effect; silence would let a run differ
from what its command line says. :func:`check_inert_keys` names each such key and why it is inert, as one
:class:`InertConfigWarning` per key, when the trainer resolves its config. Blocks (``actor.profiler``,
``trainer.v1``, ...) are compared leaf by leaf, so the warning names the exact key that was set; of a block that
acts in part (``global_profiler``, ``distillation``), :data:`INERT_KEYS` names the keys that do not.

Keys verl spells differently are translated first (``key_rules.py``); keys without any field here are dropped there
with the same warning.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "INERT_FIELDS",
    "INERT_KEYS",
    "InertConfigWarning",
    "check_inert_keys",
    "inert_settings",
    "interpolated_keys",
]

_SP = "sequence parallelism (Ulysses) is not implemented; every rank holds whole sequences"
_MM = "multi-modal rows are not supported"
_PROFILER = "no profiler is wired into this build (nsys, torch, npu, memory snapshots)"
_ENGINE = "the rollout engines here take their settings from the rollout keys in docs/config.md and engine_kwargs"
_FOLLOWS = "the actor-level key of the same name decides (actor.*)"
_NO_TRAINER_MODES = "this build has one trainer (the async recipes have their own entry points)"
_ENGINE_BATCH = "the actor, critic and ref keys decide the trainer's batches (this key acts in TrainingWorker only)"

# config class name -> {field: why it has no effect}
INERT_FIELDS: dict[str, dict[str, str]] = {
    "DataConfig": {
        "image_patch_size": _MM,
        "return_multi_modal_inputs": _MM,
        "tool_config_path": "tools come from rollout.multi_turn.tool_config_path",
        "function_tool_path": "tools come from rollout.multi_turn",
        "chat_template_func": "recorded on RLHFDataset and read by nothing, as in verl",
        "filter_prompts": "recorded on RLHFDataset and read by nothing, as in verl",
    },
    "FSDPEngineConfig": {
        "use_orig_params": "FSDP2 always keeps the original parameters",
        "seed": "initialisation and sampling are seeded by trainer.seed and rollout.seed",
        "full_determinism": "deterministic kernels are not switched on",
        "ulysses_sequence_parallel_size": _SP,
        "entropy_from_logits_with_chunking": _FOLLOWS,
        "entropy_from_logits_chunk_size": "the entropy is computed in row chunks of a fixed byte budget",
        "use_torch_compile": _FOLLOWS,
        "entropy_checkpointing": _FOLLOWS,
        "use_no_sync_for_gradient_accumulation": "gradient synchronisation across micro-batches is not configurable",
        "pad_to_length": "sequences are not padded to fixed lengths",
        "pad_to_length_bucket": "sequences are not padded to fixed lengths",
        "forward_only": "whether a model trains follows its role (the reference never does)",
        "dtype": "the trainer holds parameters in model_dtype; there is no separate compute dtype",
        "qat": "quantization-aware training is not implemented",
        "turbo_config": "verl's TurboFSDP engine is not included",
        "mixed_precision": "parameters are held in model_dtype; there is no separate mixed-precision policy",
        "use_dynamic_bsz": _ENGINE_BATCH,
        "max_token_len_per_gpu": _ENGINE_BATCH,
        "micro_batch_size_per_gpu": _ENGINE_BATCH,
        "infer_max_token_len_per_gpu": _ENGINE_BATCH,
        "infer_micro_batch_size_per_gpu": _ENGINE_BATCH,
        "use_fused_kernels": "model.use_fused_kernels decides",
        "use_remove_padding": "model.use_remove_padding decides",
        "router_replay": "MoE routing replay is not implemented",
    },
    "OptimizerConfig": {
        "grad_clip": "actor.grad_clip / critic.grad_clip clip the updates (this key only sets optim.clip_grad)",
        "zero_indexed_step": "the learning-rate schedule always counts steps from 0",
        "override_optimizer_config": "extra optimizer arguments are not passed on (AdamW from the keys above)",
    },
    "CheckpointConfig": {
        "strict": "loading strictness is not configurable",
    },
    "ActorConfig": {
        "freeze_vision_tower": f"{_MM}: there is no vision tower",
        "calculate_entropy": "the update always computes the entropy (actor/entropy)",
        "calculate_sum_pi_squared": "the sum of squared probabilities is not computed",
        "use_prefix_grouper": "shared prompt prefixes are not grouped",
        "use_fused_kernels": "model.use_fused_kernels decides",
        "use_remove_padding": "model.use_remove_padding decides",
        "profiler": _PROFILER,
        "ppo_infer_micro_batch_size_per_gpu": "log_prob_micro_batch_size_per_gpu decides",
        "ppo_infer_max_token_len_per_gpu": "log_prob_max_token_len_per_gpu decides",
        "use_rollout_log_probs": "algorithm.rollout_correction.bypass_mode takes old_log_probs from the rollout "
        "(the async recipes: async_training.use_rollout_log_probs)",
        "qat": "quantization-aware training is not implemented",
    },
    "FSDPActorConfig": {
        "ulysses_sequence_parallel_size": _SP,
        "entropy_from_logits_chunk_size": "the entropy is computed in row chunks of a fixed byte budget",
        "pad_to_length": "sequences are not padded to fixed lengths",
    },
    "CriticConfig": {
        "loss_scale_factor": "the value loss is averaged by critic.loss_agg_mode",
        "profiler": _PROFILER,
        "ppo_infer_micro_batch_size_per_gpu": "forward_micro_batch_size_per_gpu decides",
        "ppo_infer_max_token_len_per_gpu": "forward_max_token_len_per_gpu decides",
    },
    "FSDPCriticConfig": {"ulysses_sequence_parallel_size": _SP},
    "HFModelConfig": {
        "fused_kernel_options": "model.use_fused_kernels runs this build's own chunked kernel; there is no backend "
        "to pick",
        "tiled_mlp": "tiled MLP is not implemented",
        "mtp": "multi-token prediction and speculative decoding are not implemented",
        "lora": "this is verl's Megatron LoRA block; FSDP LoRA is model.lora_rank / lora_alpha / target_modules",
        "target_parameters": "LoRA adapts modules only (model.target_modules), not bare parameters",
        "local_tokenizer_path": "the tokenizer is loaded from tokenizer_path",
    },
    "MultiTurnConfig": {"num_repeat_rollouts": "each prompt is rolled out rollout.n times"},
    "CheckpointEngineConfig": {"engine_kwargs": "the built-in backends take no extra arguments"},
    "RolloutConfig": {
        "expert_parallel_size": _ENGINE,
        "pipeline_model_parallel_size": _ENGINE,
        "enable_chunked_prefill": _ENGINE,
        "enable_prefix_caching": _ENGINE,
        "logprobs_mode": "log-probs are those of the processed (temperature-scaled) distribution",
        "scheduling_policy": _ENGINE,
        "load_format": "weights always come from the trainer (checkpoint_engine)",
        "layered_summon": "LoRA weights are gathered whole for the rollout",
        "disable_log_stats": _ENGINE,
        "over_sample_rate": "every request of a step is awaited",
        "multi_stage_wake_up": _ENGINE,
        "router_config_path": "requests are routed by the agent-loop workers",
        "skip_tokenizer_init": _ENGINE,
        "enable_rollout_routing_replay": "MoE routing replay is not implemented",
        "moe_load_balance_metrics_interval": "MoE load-balance metrics are not collected",
        "quantization": "rollout quantization is not implemented (engine_kwargs reach vLLM/SGLang as given)",
        "quantization_config_file": "rollout quantization is not implemented",
        "mtp": "speculative decoding is not implemented",
        "qat": "quantization-aware training is not implemented",
        "profiler": _PROFILER,
        "trace": "rollout tracing (weave, mlflow traces) is not implemented",
        "prometheus": "the rollout servers export no Prometheus metrics",
        "disaggregation": "prefill/decode disaggregation is not implemented",
        "standalone_gpu_memory_utilization": "rollout.gpu_memory_utilization applies to standalone rollouts too",
        "moe_tensor_parallel_size": _ENGINE,
        "server": "requests reach the rollout servers as Ray calls; there is no HTTP client to tune",
        "checkpoint_manager_class": "weights reach the rollout through rollout.checkpoint_engine.backend; no "
        "manager class is loaded",
        "layer_name_map": "weights reach the rollout under the trained model's own parameter names",
        "sglang_engine_mode": _ENGINE,
        "limit_images": _MM,
        "enable_sleep_mode": "the vLLM engine always starts with sleep mode (engine_kwargs.vllm.enable_sleep_mode "
        "overrides it)",
        "log_prob_micro_batch_size": "actor.log_prob_micro_batch_size decides (verl's "
        "actor_rollout_ref.rollout.log_prob_micro_batch_size is moved there); this key reads it back",
        "custom": "free-form settings for a recipe's own rollout code; nothing in this package reads them",
    },
    "RewardConfig": {"sandbox_fusion": "no code-execution sandbox is called by the built-in scorers"},
    "RewardModelConfig": {
        "rollout": "the reward model is scored by its worker, not served by a rollout engine",
    },
    "FilterGroupsConfig": {"max_inflight_gen_batches": "generation batches are produced one at a time"},
    "TrainerConfig": {
        "esi_redundant_time": "elastic-instance checkpoint timing is not implemented",
        "checkpoint_callback_class": "checkpoint callbacks are not called",
        "use_v1": _NO_TRAINER_MODES,
        "use_legacy_worker_impl": "there is one worker implementation",
        "v1": _NO_TRAINER_MODES,
    },
    "PPOConfig": {
        "transfer_queue": "batches travel as DataProto; TransferQueue is not used",
        "skip": "rollout caching and skipping are not implemented",
    },
}

_GLOBAL_PROFILER = f"{_PROFILER}; only global_profiler.tool acts (it sets the workers' environment)"
_DISTILLATION = "this build has no distillation trainer (distillation.enabled=true is refused)"

# dotted key -> why it has no effect there: a field that acts in one group but not in another of the same class, or
# a key inside a block (a dict field) of which only some keys act
INERT_KEYS: dict[str, str] = {
    "critic.model.use_fused_kernels": "the fused kernels replace an LM head; the critic's value head has none",
    "ref.entropy_checkpointing": "the reference never trains through its entropy",
    **{
        f"global_profiler.{name}": _GLOBAL_PROFILER
        for name in (
            "steps",
            "profile_continuous_steps",
            "save_path",
            "relocate_results",
            "finish_hook_cmd",
            "finish_hook_all_ranks",
            "finish_hook_ranks",
            "global_tool_config",
        )
    },
    **{
        f"distillation.{name}": _DISTILLATION
        for name in ("distillation_loss", "n_gpus_per_node", "nnodes", "teacher_models", "teacher_key")
    },
}


class InertConfigWarning(UserWarning):
    """A config key was set to a non-default value that has no effect in this build."""


def _default_of(config: Any, name: str) -> Any:
    for f in dataclasses.fields(config):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return dataclasses.MISSING


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return list(value) == list(default)
    return value == default


def _changed_leaves(key: str, value: Any, default: Any) -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of ``value`` that differs from ``default`` (blocks compared per leaf)."""
    if dataclasses.is_dataclass(value) and type(value) is type(default):
        for f in dataclasses.fields(value):
            if f.metadata.get("runtime"):
                continue
            yield from _changed_leaves(f"{key}.{f.name}", getattr(value, f.name), getattr(default, f.name))
    elif isinstance(value, dict) and isinstance(default, dict) and default:
        for name, sub in value.items():
            if name == "_target_":  # verl's class path of the block: says nothing about its settings
                continue
            if name not in default:
                yield f"{key}.{name}", sub
            else:
                yield from _changed_leaves(f"{key}.{name}", sub, default[name])
    elif not _same(value, default):
        yield key, value


def _listed_reason(key: str) -> str | None:
    """The reason of ``key``'s entry in :data:`INERT_KEYS`, or of the entry of a block it is in."""
    parts = key.split(".")
    return next((INERT_KEYS[k] for i in range(1, len(parts) + 1) if (k := ".".join(parts[:i])) in INERT_KEYS), None)


def inert_settings(config: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """``(key, value, reason)`` for every inert key of the typed ``config`` tree that differs from its default."""
    if not dataclasses.is_dataclass(config):
        return []
    found: list[tuple[str, Any, str]] = []
    inert: dict[str, str] = {}
    config_type: type = type(config)
    for cls in config_type.__mro__:
        inert = {**INERT_FIELDS.get(cls.__name__, {}), **inert}
    for f in dataclasses.fields(config):
        if f.metadata.get("runtime"):  # an object verl's workers attach (e.g. actor.engine is actor.fsdp_config)
            continue
        value = getattr(config, f.name, None)
        key = f"{prefix}{f.name}"
        reason = inert.get(f.name, INERT_KEYS.get(key))
        default = _default_of(config, f.name)
        if reason is not None:
            if default is not dataclasses.MISSING:
                found.extend((leaf, leaf_value, reason) for leaf, leaf_value in _changed_leaves(key, value, default))
            continue
        if isinstance(value, dict) and isinstance(default, dict):  # a block of which INERT_KEYS may name some keys
            for leaf, leaf_value in _changed_leaves(key, value, default):
                if (leaf_reason := _listed_reason(leaf)) is not None:
                    found.append((leaf, leaf_value, leaf_reason))
            continue
        found.extend(inert_settings(value, key + "."))
    return found


def interpolated_keys(config: Any) -> set[str]:
    """Dotted keys of an unresolved DictConfig whose value is an interpolation (``${...}``): derived from another
    key, not set by the user (verl's full YAML derives e.g. ``rollout.trace.project_name`` from the trainer's)."""
    from omegaconf import OmegaConf

    found: set[str] = set()

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}" if not prefix else f"{prefix}.{key}")
        elif isinstance(node, str) and "${" in node:
            found.add(prefix)

    walk(OmegaConf.to_container(config, resolve=False), "")
    return found


def check_inert_keys(config: Any, skip: Iterable[str] = ()) -> list[str]:
    """Warn once per inert key set to a non-default value in the typed trainer ``config``; return the messages.

    ``skip``: keys whose values were derived rather than set (:func:`interpolated_keys`); a key under one of them
    is not reported either."""
    skipped = set(skip)

    def derived(key: str) -> bool:
        parts = key.split(".")
        return any(".".join(parts[:i]) in skipped for i in range(1, len(parts) + 1))

    messages = [
        f"config: {key}={value!r} has no effect in this build ({reason})"
        for key, value, reason in inert_settings(config)
        if not derived(key)
    ]
    for message in messages:
        warnings.warn(message, InertConfigWarning, stacklevel=2)
    return messages
