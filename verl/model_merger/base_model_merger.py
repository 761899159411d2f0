"""Command line, config and the backend-independent half of the merger: writing a Hugging Face folder.

A backend (:mod:`.fsdp_model_merger`) turns a training checkpoint into one full state dict with Hugging Face names;
this module writes it with the config, generation config and tokenizer saved beside the checkpoint
(``<local_dir>/huggingface``), splits LoRA adapters into ``lora_adapter/`` as verl does, checks the result, and
optionally uploads it to the Hugging Face Hub.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from verl.model_merger.output_validation import validate_hf_model_output

__all__ = ["BaseModelMerger", "ModelMergerConfig", "generate_config_from_args", "parse_args"]

logger = logging.getLogger(__name__)

BACKENDS = ("fsdp", "megatron")
LORA_META_FILE = "lora_train_meta.json"
_PEFT_PREFIX = "base_model.model."


def build_parser() -> argparse.ArgumentParser:
    """verl's ``merge`` / ``test`` sub-commands and their flags."""
    parser = argparse.ArgumentParser(
        prog="python -m verl.model_merger",
        description="Turn a verl training checkpoint into a Hugging Face model folder.",
    )
    ops = parser.add_subparsers(dest="operation", required=True, help="merge: write a folder; test: compare")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", required=True, choices=BACKENDS, help="the engine that wrote the checkpoint")
    common.add_argument("--local_dir", default=None, help="checkpoint folder, e.g. .../global_step_10/actor")
    common.add_argument("--tie-word-embedding", action="store_true", help="Megatron only")
    common.add_argument("--trust-remote-code", action="store_true", help="trust the model's remote code")
    common.add_argument("--is-value-model", action="store_true", help="Megatron only")
    common.add_argument("--use_cpu_initialization", action="store_true", help="Megatron only")
    merge = ops.add_parser("merge", parents=[common], help="write the merged Hugging Face model")
    merge.add_argument("--target_dir", default="tmp", help="folder to write the model into")
    merge.add_argument("--hf_upload_path", default=None, help="Hub repository id to upload the folder to")
    merge.add_argument("--private", action="store_true", help="create the Hub repository as private")
    test = ops.add_parser("test", parents=[common], help="compare the merged weights with a reference model")
    test.add_argument("--test_hf_dir", required=True, help="reference Hugging Face model folder")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


@dataclass
class ModelMergerConfig:
    """What to merge and where to put it. ``hf_model_config_path`` holds the config and tokenizer (default
    ``<local_dir>/huggingface``); ``hf_upload`` is derived (merge with an upload path)."""

    operation: str
    backend: str
    target_dir: str | None = "tmp"
    hf_upload_path: str | None = None
    private: bool = False
    test_hf_dir: str | None = None
    tie_word_embedding: bool = False
    trust_remote_code: bool = False
    is_value_model: bool = False
    local_dir: str | None = None
    hf_model_config_path: str | None = None
    hf_upload: bool = field(init=False)
    use_cpu_initialization: bool = False

    def __post_init__(self) -> None:
        self.hf_upload = self.operation == "merge" and bool(self.hf_upload_path)
        if self.operation == "test":
            self.target_dir, self.hf_upload_path, self.private = None, None, False


def generate_config_from_args(args: argparse.Namespace) -> ModelMergerConfig:
    """Config from parsed arguments; ``merge`` creates ``--target_dir``."""
    if not args.local_dir:
        raise ValueError("--local_dir is required: the checkpoint folder (e.g. .../global_step_10/actor)")
    local_dir = os.path.expanduser(args.local_dir)
    hf_dir = (
        os.path.join(local_dir, "model", "huggingface")
        if args.backend == "megatron"
        else os.path.join(local_dir, "huggingface")
    )
    common = {
        "operation": args.operation,
        "backend": args.backend,
        "tie_word_embedding": args.tie_word_embedding,
        "trust_remote_code": args.trust_remote_code,
        "is_value_model": args.is_value_model,
        "local_dir": local_dir,
        "hf_model_config_path": hf_dir,
        "use_cpu_initialization": args.use_cpu_initialization,
    }
    if args.operation == "merge":
        config = ModelMergerConfig(
            **common,
            target_dir=os.path.expanduser(args.target_dir),
            hf_upload_path=args.hf_upload_path,
            private=args.private,
        )
        os.makedirs(config.target_dir, exist_ok=True)
        return config
    if args.operation == "test":
        return ModelMergerConfig(**common, test_hf_dir=os.path.expanduser(args.test_hf_dir))
    raise NotImplementedError(f"unknown operation {args.operation!r}; use merge or test")


def split_lora(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(base weights under Hugging Face names, LoRA factors under PEFT's saved names ``...lora_A.weight``)."""
    from verl.checkpoint_engine import normalize_weight_name

    base: dict[str, torch.Tensor] = {}
    adapter: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if ".lora_A." in key or ".lora_B." in key:
            name = key if key.startswith(_PEFT_PREFIX) else _PEFT_PREFIX + key
            adapter[name.replace(".default.weight", ".weight")] = tensor
        elif ".lora_" in key:
            raise NotImplementedError(f"cannot export LoRA weight {key!r}: only linear lora_A/lora_B adapters are")
        else:
            base[normalize_weight_name(key)] = tensor
    return base, adapter


class BaseModelMerger(ABC):
    """Reads the Hugging Face config beside the checkpoint; subclasses collect the weights."""

    def __init__(self, config: ModelMergerConfig) -> None:
        from transformers import AutoConfig

        self.config = config
        self.hf_model_config_path = config.hf_model_config_path
        if not os.path.isfile(os.path.join(str(self.hf_model_config_path), "config.json")):
            raise FileNotFoundError(
                f"--local_dir {config.local_dir}: no Hugging Face config at {self.hf_model_config_path}/config.json; "
                "point --local_dir at a checkpoint folder such as .../global_step_10/actor"
            )
        self.model_config = AutoConfig.from_pretrained(
            self.hf_model_config_path, trust_remote_code=config.trust_remote_code
        )

    # ------------------------------------------------------------------ model class and dtype
    def get_transformers_auto_model_class(self) -> Any:
        """The transformers Auto class that builds ``architectures[0]`` (causal LM, token classification, VLM)."""
        import transformers

        arch = (getattr(self.model_config, "architectures", None) or [""])[0]
        auto_map = getattr(self.model_config, "auto_map", None) or {}
        for auto_name, target in auto_map.items():
            if arch and arch in str(target):
                name = "AutoModelForImageTextToText" if auto_name == "AutoModelForVision2Seq" else auto_name
                if hasattr(transformers, name):
                    return getattr(transformers, name)
                raise NotImplementedError(f"{self.hf_model_config_path}: unknown auto class {auto_name!r}")
        for suffix, name in (
            ("ForTokenClassification", "AutoModelForTokenClassification"),
            ("ForCausalLM", "AutoModelForCausalLM"),
            ("ForConditionalGeneration", "AutoModelForImageTextToText"),
        ):
            if arch.endswith(suffix):
                return getattr(transformers, name)
        raise NotImplementedError(
            f"{self.hf_model_config_path}/config.json: unsupported architectures "
            f"{getattr(self.model_config, 'architectures', None)}"
        )

    def target_dtype(self) -> torch.dtype | None:
        """The dtype config.json declares (the checkpoint's original one); None keeps the trained dtype."""
        dtype = getattr(self.model_config, "dtype", None) or getattr(self.model_config, "torch_dtype", None)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
        return dtype if isinstance(dtype, torch.dtype) else None

    def cast(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        dtype = self.target_dtype()
        if dtype is None:
            return state
        return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}

    # ------------------------------------------------------------------ generation config
    def load_generation_config(self, warn_if_missing: bool = True) -> Any:
        from transformers import GenerationConfig

        if not os.path.isfile(os.path.join(self.hf_model_config_path, "generation_config.json")):
            if warn_if_missing:
                logger.warning(
                    "%s has no generation_config.json; the merged model gets one derived from its config",
                    self.hf_model_config_path,
                )
            return None
        return GenerationConfig.from_pretrained(self.hf_model_config_path)

    def patch_model_generation_config(self, model: Any) -> Any:
        """Give ``model`` the checkpoint's own generation config (a derived one may sample differently)."""
        generation_config = self.load_generation_config()
        if generation_config is not None and getattr(model, "can_generate", lambda: False)():
            model.generation_config = generation_config
        return model

    def save_generation_config(self, target_dir: str) -> None:
        generation_config = self.load_generation_config(warn_if_missing=False)
        if generation_config is not None:
            generation_config.save_pretrained(target_dir)

    # ------------------------------------------------------------------ LoRA
    def _lora_meta(self) -> dict[str, Any]:
        """Rank / alpha / task type saved with the checkpoint (SFT: lora_train_meta.json; an hf_model export:
        huggingface/lora_adapter/adapter_config.json)."""
        local = Path(self.config.local_dir or "")
        for path in (local / LORA_META_FILE, Path(self.hf_model_config_path) / "lora_adapter" / "adapter_config.json"):
            if path.is_file():
                try:
                    return json.loads(path.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as exc:
                    logger.warning("could not read LoRA settings from %s: %s", path, exc)
        return {}

    def save_lora_adapter(self, state_dict: dict[str, torch.Tensor]) -> str | None:
        """Move LoRA factors out of ``state_dict`` (in place, leaving base weights under Hugging Face names) into
        ``<target_dir>/lora_adapter`` (PEFT layout); returns that folder, or None without adapters."""
        base, adapter = split_lora(state_dict)
        state_dict.clear()
        state_dict.update(base)
        if not adapter:
            return None
        from safetensors.torch import save_file

        some = next(iter(adapter.values()))
        meta = self._lora_meta()
        rank = int(meta.get("r") or min(some.shape))
        alpha = meta.get("lora_alpha")
        if alpha is None:
            alpha = 0
            logger.warning(
                "no LoRA alpha saved with %s (lora_train_meta.json); lora_adapter/adapter_config.json gets "
                "lora_alpha=0, which disables the adapter until you set the training value there",
                self.config.local_dir,
            )
        targets = sorted({key.rsplit(".", 3)[1] for key in adapter})  # "<path>.q_proj.lora_A.weight"
        peft_config = {
            "peft_type": "LORA",
            "r": rank,
            "lora_alpha": alpha,
            "target_modules": targets,
            "task_type": meta.get("task_type") or "CAUSAL_LM",
            "bias": "none",
            "lora_dropout": 0.0,
            "base_model_name_or_path": None,
            "inference_mode": True,
        }
        out = Path(self.config.target_dir) / "lora_adapter"
        out.mkdir(parents=True, exist_ok=True)
        (out / "adapter_config.json").write_text(json.dumps(peft_config, indent=2) + "\n", encoding="utf-8")
        save_file({k: v.contiguous() for k, v in adapter.items()}, str(out / "adapter_model.safetensors"))
        return str(out)

    # ------------------------------------------------------------------ writing
    def save_hf_model_and_tokenizer(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Write weights (sharded like ``save_pretrained``), config, generation config and tokenizer to
        ``target_dir``, then check the folder is complete."""
        lora_path = self.save_lora_adapter(state_dict)
        if lora_path:
            print(f"LoRA adapter saved to {lora_path} (the folder's weights are the base model's)")
        state_dict = self.cast(state_dict)
        auto_class = self.get_transformers_auto_model_class()
        with torch.device("meta"):
            model = auto_class.from_config(self.model_config, trust_remote_code=self.config.trust_remote_code)
        model = self.patch_model_generation_config(model)
        expected = set(model.state_dict())
        missing = sorted(expected - set(state_dict) - _tied_keys(model))
        if missing:
            raise ValueError(
                f"--local_dir {self.config.local_dir}: the checkpoint lacks weights the model needs, e.g. {missing[:5]}"
            )
        print(f"Saving model to {self.config.target_dir}")
        model.save_pretrained(self.config.target_dir, state_dict=state_dict)
        self.save_generation_config(self.config.target_dir)
        self._save_processing(self.config.target_dir)
        validate_hf_model_output(self.config.target_dir)

    def _save_processing(self, target_dir: str) -> None:
        from transformers import AutoProcessor, AutoTokenizer

        trust = self.config.trust_remote_code
        try:
            AutoTokenizer.from_pretrained(self.hf_model_config_path, trust_remote_code=trust).save_pretrained(
                target_dir
            )
        except (OSError, ValueError) as exc:
            logger.warning("no tokenizer saved: %s has none readable (%s)", self.hf_model_config_path, exc)
        if (Path(self.hf_model_config_path) / "preprocessor_config.json").is_file():
            AutoProcessor.from_pretrained(self.hf_model_config_path, trust_remote_code=trust).save_pretrained(
                target_dir
            )

    def upload_to_huggingface(self) -> None:
        """Create ``--hf_upload_path`` on the Hub (``--private``) and upload ``target_dir`` into it."""
        from huggingface_hub import HfApi

        api = HfApi()
        try:
            api.create_repo(repo_id=self.config.hf_upload_path, private=self.config.private, exist_ok=True)
            api.upload_folder(folder_path=self.config.target_dir, repo_id=self.config.hf_upload_path, repo_type="model")
        except Exception as exc:
            raise RuntimeError(
                f"--hf_upload_path {self.config.hf_upload_path}: upload failed: {type(exc).__name__}: {exc}"
            ) from exc

    @abstractmethod
    def merge_and_save(self) -> None:
        """Collect the weights and write (merge) or compare (test) them."""

    @abstractmethod
    def cleanup(self) -> None:
        """Release whatever the backend set up."""


def _tied_keys(model: Any) -> set[str]:
    """State-dict keys that share storage with an earlier key (e.g. lm_head tied to the embedding)."""
    if not getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        return set()
    out = getattr(model, "get_output_embeddings", lambda: None)()
    if out is None:
        return set()
    return {name + ".weight" for name, module in model.named_modules() if module is out}
