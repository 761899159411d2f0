"""``BaseModelConfig``: the few keys that locate and load a pretrained checkpoint (verl's trainer-level model block).

Recipes subclass it for their own model blocks (a critic or teacher with extra keys). The workers of this package
read the richer :class:`verl.workers.config.HFModelConfig`; :meth:`BaseModelConfig.to_hf_model_config` turns one into
the other so a recipe's block can drive them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.workers.config.engine import FSDPEngineConfig

__all__ = ["BaseModelConfig", "FSDPCriticModelCfg"]


@dataclass
class BaseModelConfig(BaseConfig):
    """``path``: the checkpoint folder or hub id; ``tokenizer_path``: its tokenizer when elsewhere (null: ``path``);
    ``override_config``: Hugging Face config overrides; ``external_lib``: a module to import first (it registers
    custom architectures); ``trust_remote_code``; ``lora``: LoRA settings (``rank``, ``alpha``, ``target_modules``).
    """

    path: str = "~/models/deepseek-llm-7b-chat"
    tokenizer_path: str | None = None
    override_config: dict[str, Any] = field(default_factory=dict)
    external_lib: str | None = None
    trust_remote_code: bool = False
    lora: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(isinstance(self.path, str) and self.path != "", "path", "must name a model folder or hub id")

    def to_hf_model_config(self, **overrides: Any) -> Any:
        """This block as an :class:`~verl.workers.config.HFModelConfig` (``lora.rank`` / ``lora.alpha`` /
        ``lora.target_modules`` become its LoRA fields); ``overrides`` set any other field of it."""
        from verl.workers.config.model import HFModelConfig

        values: dict[str, Any] = {
            "path": self.path,
            "tokenizer_path": self.tokenizer_path,
            "override_config": dict(self.override_config),
            "external_lib": self.external_lib,
            "trust_remote_code": self.trust_remote_code,
        }
        lora = dict(self.lora or {})
        for source, target in (("rank", "lora_rank"), ("alpha", "lora_alpha"), ("target_modules", "target_modules")):
            if lora.get(source) is not None:
                values[target] = lora[source]
        values.update(overrides)
        return HFModelConfig(**values)


@dataclass
class FSDPCriticModelCfg(BaseModelConfig):
    """verl's model block of an FSDP critic (also importable from :mod:`verl.workers.config.critic`): the checkpoint
    keys plus its loading, LoRA and sharding (``fsdp_config``) knobs. The trainer's critic reads ``critic.model``
    (:class:`~verl.workers.config.HFModelConfig`) and ``critic.fsdp_config`` instead; this class is for recipes
    that build verl's block themselves."""

    use_shm: bool = False
    enable_activation_offload: bool = False
    use_remove_padding: bool = False
    enable_gradient_checkpointing: bool = True
    fsdp_config: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    tiled_mlp: dict[str, Any] = field(default_factory=lambda: {"enabled": False, "num_shards": 4})
