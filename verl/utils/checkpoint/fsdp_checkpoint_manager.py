"""FSDPCheckpointManager in verl's checkpoint layout: one file per rank per part.

Layout of ``local_path`` (what verl writes, so checkpoints move between verl and this package both ways)::

    model_world_size_{W}_rank_{r}.pt        rank r's ``model.state_dict()`` (its shards; adapters only with
                                            checkpoint.save_lora_only on a LoRA model)
    optim_world_size_{W}_rank_{r}.pt        rank r's ``optimizer.state_dict()``
    extra_state_world_size_{W}_rank_{r}.pt  {"lr_scheduler": state, "rng": RNG states}
    huggingface/                            config, generation config, tokenizer (weights too with ``hf_model``)
    fsdp_config.json                        {"FSDP_version", "world_size"}
    lora_train_meta.json                    {"r", "lora_alpha", "task_type"} of a LoRA model

A folder written by the workers' own manager (:mod:`verl.utils.checkpoint.dcp_checkpoint_manager`, a
``torch.distributed.checkpoint`` layout any world size can load) is recognised and loaded through that manager.
Per-rank files can only be loaded by the same world size; a mismatch is reported with the sizes found.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager, dist_barrier
from verl.utils.checkpoint.config import CheckpointConfig

__all__ = ["FSDPCheckpointManager", "FSDPConfig"]

logger = logging.getLogger(__name__)

_WORKER_LAYOUT_META = "checkpoint_meta.json"


@dataclass
class FSDPConfig:
    """What ``fsdp_config.json`` records about the run that saved a checkpoint."""

    FSDP_version: int
    world_size: int


def fsdp_version(model: Any) -> int:
    """2 for a ``fully_shard``-ed module, 1 for an FSDP1 wrapper, 0 otherwise."""
    try:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1
    except ImportError:  # a torch without FSDP
        return 0
    if isinstance(model, FSDPModule):
        return 2
    return 1 if isinstance(model, FSDP1) else 0


def _unwrap(model: Any) -> Any:
    return getattr(model, "_fsdp_wrapped_module", model)


def _nbytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


class FSDPCheckpointManager(BaseCheckpointManager):
    """Save and load an FSDP model's training state, one file per rank (see the module docstring).

    Args:
        model: the FSDP-wrapped model (FSDP2 ``fully_shard`` or FSDP1).
        optimizer / lr_scheduler / processing_class / checkpoint_config: see :class:`BaseCheckpointManager`.
        trust_remote_code: passed when building the Hugging Face model for an ``hf_model`` export.
        hf_config: config written to ``huggingface/`` when the model carries none.
        export_weights: ``fn(out_dir)`` writing full Hugging Face weights (collective); default gathers the model.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        checkpoint_config: Any = None,
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> None:
        if processing_class is None and "tokenizer" in kwargs:
            warnings.warn(
                "FSDPCheckpointManager(tokenizer=...) is deprecated; pass processing_class",
                DeprecationWarning,
                stacklevel=2,
            )
            processing_class = kwargs.pop("tokenizer")
        self.hf_config = kwargs.pop("hf_config", None)
        self.export_weights: Callable[[str], None] | None = kwargs.pop("export_weights", None)
        if kwargs:
            raise TypeError(f"FSDPCheckpointManager got unexpected keyword arguments {sorted(kwargs)}")
        super().__init__(
            model,
            optimizer,
            lr_scheduler=lr_scheduler,
            processing_class=processing_class,
            checkpoint_config=checkpoint_config,
        )
        self.trust_remote_code = trust_remote_code

    # -- file names ------------------------------------------------------------------------------------------------
    def _path(self, local_path: str, part: str) -> str:
        return os.path.join(local_path, f"{part}_world_size_{self.world_size}_rank_{self.rank}.pt")

    def _has_lora(self) -> bool:
        return hasattr(_unwrap(self.model), "peft_config")

    def _lora_train_meta(self) -> dict[str, Any] | None:
        peft_config = getattr(_unwrap(self.model), "peft_config", None)
        if isinstance(peft_config, dict):
            peft_config = peft_config.get("default") or next(iter(peft_config.values()), None)
        rank = int(getattr(peft_config, "r", 0) or 0) if peft_config is not None else 0
        if rank <= 0:
            return None
        task_type = getattr(peft_config, "task_type", None) or "CAUSAL_LM"
        return {
            "r": rank,
            "lora_alpha": int(getattr(peft_config, "lora_alpha", rank) or 0),
            "task_type": str(getattr(task_type, "value", task_type)),
        }

    # -- save --------------------------------------------------------------------------------------------------------
    def save_checkpoint(
        self,
        local_path: str | None,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ) -> str | None:
        """Write this rank's files into ``local_path`` (collective: every rank calls), then apply retention."""
        if local_path is None:
            return None
        self.previous_global_step = global_step
        if self.rank == 0:
            self.ensure_checkpoint_capacity(max_ckpt_to_keep)
        os.makedirs(local_path, exist_ok=True)
        dist_barrier()
        if self.should_save_model and self.model is None:
            raise ValueError("checkpoint.save_contents includes 'model' but the manager has no model")
        if self.should_save_optimizer and self.optimizer is None:
            raise ValueError("checkpoint.save_contents includes 'optimizer' but the manager has no optimizer")
        if self.should_save_model:
            torch.save(self._model_state_to_save(), self._path(local_path, "model"))
        if self.should_save_optimizer:
            torch.save(self.optimizer.state_dict(), self._path(local_path, "optim"))
        if self.should_save_extra:
            scheduler = self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None
            torch.save({"lr_scheduler": scheduler, "rng": self.get_rng_state()}, self._path(local_path, "extra_state"))
        if self.rank == 0:
            self._save_metadata(local_path)
        dist_barrier()
        if self.should_save_hf_model:
            self._export_hf(os.path.join(local_path, "huggingface"))
            dist_barrier()
        if self.rank == 0:
            self.register_checkpoint(local_path, max_ckpt_to_keep)
        return local_path

    def _model_state_to_save(self) -> dict[str, Any]:
        state = self.model.state_dict()
        if not (self.should_save_lora_only and self._has_lora()):
            return state
        adapters = self.lora_only(state)
        if not adapters:
            raise ValueError(
                f"checkpoint.save_lora_only is set and the model has a peft_config, but none of its {len(state)} "
                "state-dict keys is a LoRA/adapter tensor"
            )
        logger.info(
            "LoRA-only checkpoint: %d of %d tensors (%.1f MiB)",
            len(adapters),
            len(state),
            sum(_nbytes(v) for v in adapters.values()) / 2**20,
        )
        return adapters

    def _save_metadata(self, local_path: str) -> None:
        hf_dir = os.path.join(local_path, "huggingface")
        os.makedirs(hf_dir, exist_ok=True)
        unwrapped = _unwrap(self.model)
        config = getattr(unwrapped, "config", None) or self.hf_config
        if config is not None:
            config.save_pretrained(hf_dir)
        generation_config = getattr(unwrapped, "generation_config", None)
        if generation_config is not None:
            generation_config.save_pretrained(hf_dir)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(hf_dir)
        with open(os.path.join(local_path, "fsdp_config.json"), "w") as f:
            json.dump(
                asdict(FSDPConfig(FSDP_version=fsdp_version(self.model), world_size=self.world_size)), f, indent=4
            )
        meta = self._lora_train_meta()
        if meta is not None:
            with open(os.path.join(local_path, "lora_train_meta.json"), "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=4)

    def _export_hf(self, hf_dir: str) -> None:
        if self.export_weights is not None:
            self.export_weights(hf_dir)
            return
        if not isinstance(self.model, torch.nn.Module):
            raise TypeError(
                "checkpoint.save_contents includes 'hf_model' but the model is not a torch module; pass "
                "export_weights=fn(out_dir)"
            )
        from verl.utils.checkpoint.hf_export import export_hf_weights

        export_hf_weights(self.model, hf_dir)

    # -- load --------------------------------------------------------------------------------------------------------
    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> Any:
        """Restore what ``checkpoint.load_contents`` names from ``local_path`` (collective)."""
        if local_path is None:
            return None
        if os.path.isfile(os.path.join(local_path, _WORKER_LAYOUT_META)):
            return self._load_worker_layout(local_path, del_local_after_load)
        if self.should_load_model:
            if self.model is None:
                raise ValueError("checkpoint.load_contents includes 'model' but the manager has no model")
            self._load_model(self._existing(local_path, "model"))
        if self.should_load_optimizer:
            if self.optimizer is None:
                raise ValueError("checkpoint.load_contents includes 'optimizer' but the manager has no optimizer")
            self.optimizer.load_state_dict(torch.load(self._existing(local_path, "optim"), weights_only=False))
        if self.should_load_extra:
            extra = torch.load(self._existing(local_path, "extra_state"), weights_only=False)
            if "rng" in extra:
                self.load_rng_state(extra["rng"])
            if extra.get("lr_scheduler") is not None and self.lr_scheduler is not None:
                self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        dist_barrier()
        return None

    def _existing(self, local_path: str, part: str) -> str:
        path = self._path(local_path, part)
        if os.path.isfile(path):
            return path
        pattern = re.compile(rf"^{part}_world_size_(\d+)_rank_\d+\.pt$")
        sizes = sorted({int(m.group(1)) for name in os.listdir(local_path) if (m := pattern.match(name))})
        found = f"it holds {part} files of world size {sizes}" if sizes else f"it holds no {part} files"
        raise FileNotFoundError(
            f"checkpoint {local_path!r} has no {os.path.basename(path)} for rank {self.rank} of "
            f"{self.world_size}; {found}"
        )

    def _load_model(self, path: str) -> None:
        state = torch.load(path, weights_only=False)
        if not self.is_lora_only_state_dict(state):
            self.model.load_state_dict(state)
            return
        result = self.model.load_state_dict(state, strict=False)
        unexpected = list(getattr(result, "unexpected_keys", None) or [])
        if unexpected:
            raise ValueError(
                f"LoRA-only checkpoint {path!r} has keys the model does not: {unexpected}; the model "
                "needs the same LoRA adapters (model.lora_rank, model.target_modules)"
            )
        logger.info("loaded LoRA-only checkpoint %s (%d tensors; base weights kept)", path, len(state))

    def _load_worker_layout(self, local_path: str, del_local_after_load: bool) -> dict[str, Any]:
        from verl.utils.checkpoint.dcp_checkpoint_manager import FSDPCheckpointManager as WorkerCheckpointManager

        manager = WorkerCheckpointManager(
            self.model,
            self.optimizer,
            self.lr_scheduler,
            processing_class=self.processing_class,
            checkpoint_config=CheckpointConfig(
                save_contents=self.checkpoint_save_contents, load_contents=self.checkpoint_load_contents
            ),
        )
        return manager.load_checkpoint(local_path, del_local_after_load=del_local_after_load)
