"""HFModelConfig: the Hugging Face checkpoint shared by actor, ref and rollout (group ``model``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.workers.config.inert_blocks import inert_block

__all__ = ["BUILTIN_TINY_MODEL", "DEFAULT_ATTN_IMPLEMENTATION", "HFModelConfig", "attn_implementation_of"]

# Sentinel for ``model.path``: "build the project's tiny demo model (verl.utils.tiny_model) and use that folder".
# It lets `python -m verl.trainer.main_ppo` run with no arguments on a machine that cannot reach a model hub.
BUILTIN_TINY_MODEL = "verl:tiny-demo"
DEFAULT_ATTN_IMPLEMENTATION = "sdpa"  # when model.override_config names none


def attn_implementation_of(override_config: Any) -> str:
    """The attention kernel a model block's ``override_config`` asks for, else :data:`DEFAULT_ATTN_IMPLEMENTATION`.

    One rule for the typed :class:`HFModelConfig` and for the loader's plain model blocks.
    """
    return str(dict(override_config or {}).get("attn_implementation") or DEFAULT_ATTN_IMPLEMENTATION)


@dataclass
class HFModelConfig(BaseConfig):
    """Where the model lives and how to load it; the worker does the loading, this only describes it.

    ``tokenizer_path`` defaults to ``path``. ``lora_rank > 0`` turns on LoRA with ``lora_alpha`` / ``target_modules``.
    ``use_shm`` reads the checkpoint from a copy in ``/dev/shm`` that every process of the node shares.
    ``enable_activation_offload`` keeps what a trainable model's forward saves for backward in pinned host memory.
    ``use_fused_kernels`` has the policy's LM head compute log-probs and entropy per chunk of rows instead of making
    the ``[tokens, vocab]`` logits (:mod:`verl.workers.actor.fused_head`).
    ``fused_kernel_options``, ``tiled_mlp``, ``mtp`` and ``lora`` (the Megatron engine's LoRA block) are verl's keys
    without effect here (``inert_keys.py``).
    """

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
