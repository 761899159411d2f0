"""HFModelConfig: the Hugging Face checkpoint shared by actor, ref and rollout (group ``model``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.utils.tiny_model import BUILTIN_TINY_MODEL
from verl.workers.config.inert_blocks import inert_block

__all__ = [
    "BUILTIN_TINY_MODEL",
    "DEFAULT_ATTN_IMPLEMENTATION",
    "RUNTIME_FIELD",
    "HFModelConfig",
    "MtpConfig",
    "attn_implementation_of",
]

# Marks a field holding a run-time object verl's workers attach (the backend block as ``engine``, the loaded
# tokenizer or Hugging Face config), not a setting: equality and the inert-key checks skip it.
RUNTIME_FIELD = {"runtime": True}

DEFAULT_ATTN_IMPLEMENTATION = "sdpa"  # when model.override_config names none


def attn_implementation_of(override_config: Any) -> str:
    """The attention kernel a model block's ``override_config`` asks for, else :data:`DEFAULT_ATTN_IMPLEMENTATION`.

    One rule for the typed :class:`HFModelConfig` and for the loader's plain model blocks.
    """
    return str(dict(override_config or {}).get("attn_implementation") or DEFAULT_ATTN_IMPLEMENTATION)


@dataclass
class MtpConfig(BaseConfig):
    """Multi-token prediction: load/save the MTP layers (``enable``), train them (``enable_train``, with
    ``detach_encoder`` and ``mtp_loss_scaling_factor``) or use them for speculative decoding in the rollout
    (``enable_rollout``; the ``speculative_*`` keys for SGLang, ``method`` / ``num_speculative_tokens`` for vLLM).
    Not implemented here: ``model.mtp`` and ``rollout.mtp`` have no effect."""

    enable: bool = False
    enable_train: bool = False
    enable_rollout: bool = False
    detach_encoder: bool = False
    mtp_loss_scaling_factor: float = 0.1
    speculative_algorithm: str = "EAGLE"
    speculative_num_steps: int = 3
    speculative_eagle_topk: int = 1
    speculative_num_draft_tokens: int = 4
    method: str = "mtp"
    num_speculative_tokens: int = 1


@dataclass
class HFModelConfig(BaseConfig):
    """Where the model lives and how to load it; the worker does the loading, this only describes it.

    ``tokenizer_path`` defaults to ``path``. ``lora_rank > 0`` turns on LoRA with ``lora_alpha`` / ``target_modules``.
    ``use_shm`` reads the checkpoint from a copy in ``/dev/shm`` that every process of the node shares.
    ``enable_activation_offload`` keeps what a trainable model's forward saves for backward in pinned host memory.
    ``use_fused_kernels`` has the policy's LM head compute log-probs and entropy per chunk of rows instead of making
    the ``[tokens, vocab]`` logits (:mod:`verl.workers.actor.fused_head`).
    ``fused_kernel_options``, ``tiled_mlp``, ``mtp``, ``lora`` (the Megatron engine's LoRA block) and
    ``target_parameters`` are verl's keys without effect here (``inert_keys.py``).

    The fields after ``target_parameters`` are what verl's own class fills in when it loads the model (local
    copies of the checkpoint, the loaded Hugging Face config, tokenizer and processor). The workers here load the
    model themselves, so they stay None unless a recipe sets them (they are mutable, as in verl); ``model_type``
    names the head (``language_model`` or ``value_model``).
    """

    _mutable_fields = frozenset(
        {
            "local_path",
            "local_hf_config_path",
            "local_tokenizer_path",
            "model_type",
            "hf_config",
            "generation_config",
            "tokenizer",
            "processor",
            "architectures",
        }
    )

    path: str = BUILTIN_TINY_MODEL
    tokenizer_path: str | None = None
    hf_config_path: str | None = None
    trust_remote_code: bool = False
    override_config: dict[str, Any] = field(default_factory=dict)
    enable_gradient_checkpointing: bool = False
    enable_activation_offload: bool = False
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    use_liger: bool = False
    use_shm: bool = False
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    exclude_modules: str | None = None
    lora_adapter_path: str | None = None
    external_lib: str | None = None
    custom_chat_template: str | None = None
    fused_kernel_options: dict[str, Any] = field(default_factory=lambda: {"impl_backend": "torch"})
    tiled_mlp: dict[str, Any] = field(default_factory=lambda: {"enabled": False, "num_shards": 4})
    mtp: dict[str, Any] = field(default_factory=lambda: inert_block("mtp"))
    lora: dict[str, Any] = field(default_factory=lambda: inert_block("megatron_lora"))
    target_parameters: list[str] | None = None
    local_path: str | None = None
    local_hf_config_path: str | None = None
    local_tokenizer_path: str | None = None
    model_type: str = "language_model"
    load_tokenizer: bool = True
    hf_config: Any = field(default=None, compare=False, repr=False, metadata=RUNTIME_FIELD)
    generation_config: Any = field(default=None, compare=False, repr=False, metadata=RUNTIME_FIELD)
    tokenizer: Any = field(default=None, compare=False, repr=False, metadata=RUNTIME_FIELD)
    processor: Any = field(default=None, compare=False, repr=False, metadata=RUNTIME_FIELD)
    architectures: list[str] | None = None

    def __post_init__(self) -> None:
        check(isinstance(self.path, str) and self.path != "", "path", "must name a model folder or hub id")
        check(self.lora_rank >= 0, "lora_rank", f"must be >= 0, got {self.lora_rank}")
        check(self.lora_rank == 0 or self.lora_alpha > 0, "lora_alpha", f"must be > 0 with LoRA, got {self.lora_alpha}")
        if self.tokenizer_path is None:
            object.__setattr__(self, "tokenizer_path", self.path)

    @property
    def attn_implementation(self) -> str:
        """The attention kernel the model is loaded with: ``override_config.attn_implementation``, else ``sdpa``."""
        return attn_implementation_of(self.override_config)

    @property
    def is_builtin_tiny(self) -> bool:
        """True when ``path`` is the built-in demo sentinel :data:`BUILTIN_TINY_MODEL`."""
        return self.path == BUILTIN_TINY_MODEL
