"""BaseCheckpointManager: what every per-model checkpoint manager shares (verl's API).

A manager saves and restores one model's training state on every rank of its group: which parts (``model``,
``optimizer``, ``extra`` = LR schedule and RNG, ``hf_model``) follow ``checkpoint.save_contents`` /
``load_contents``; retention (``max_ckpt_to_keep``) deletes the oldest folders this manager wrote. Subclasses
implement ``save_checkpoint`` / ``load_checkpoint`` for one layout.

Also here: the tracker file a trainer writes next to its ``global_step_{k}`` folders, and how to find the newest.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from verl.utils.checkpoint.config import CheckpointConfig
from verl.utils.config_builder import as_config

__all__ = [
    "BaseCheckpointManager",
    "checkpoint_contents",
    "find_latest_ckpt_path",
    "get_checkpoint_tracker_filename",
    "should_save_ckpt_esi",
]

logger = logging.getLogger(__name__)

DEFAULT_CONTENTS = ("model", "optimizer", "extra")
# Written by the trainer after each complete checkpoint (same name as verl.trainer.ppo.checkpointing.TRACKER_FILE).
TRACKER_FILE = "latest_checkpointed_iteration.txt"
_LORA_KEY_MARKERS = ("lora_", ".adapter_")


def checkpoint_contents(config: Any) -> CheckpointConfig:
    """``config`` as a :class:`CheckpointConfig`, converted once at a manager's door (a DictConfig, a dict, None
    for the defaults, or a dataclass instance as is; unknown keys are refused by name). A block given without
    ``load_contents`` loads model, optimizer and extra, as verl's managers do."""
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    if isinstance(config, Mapping) and config.get("load_contents") is None:
        config = {**config, "load_contents": list(DEFAULT_CONTENTS)}
    return as_config(config, CheckpointConfig, "checkpoint")


def dist_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def dist_world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def dist_barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class BaseCheckpointManager:
    """Contents selection, retention and RNG capture for a model's checkpoints (see the module docstring).

    Args:
        model: the (possibly sharded) model.
        optimizer / lr_scheduler: optional (a frozen reference model has neither).
        processing_class: tokenizer or processor written next to the weights.
        checkpoint_config: the ``checkpoint`` block (typed, a DictConfig or a dict; see :func:`checkpoint_contents`):
            ``save_contents``, ``load_contents`` (default: model, optimizer, extra) and ``save_lora_only`` (keep only
            adapter tensors of a LoRA model).
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        checkpoint_config: Any = None,
    ) -> None:
        self.checkpoint_config = checkpoint_contents(checkpoint_config)
        save, load = self.checkpoint_config.save_contents, self.checkpoint_config.load_contents
        self.checkpoint_save_contents = list(DEFAULT_CONTENTS if save is None else save)
        self.checkpoint_load_contents = list(DEFAULT_CONTENTS if load is None else load)
        self.previous_global_step: int | None = None
        self.previous_saved_paths: list[str] = []
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        self.rank = dist_rank()
        self.world_size = dist_world_size()

    # -- what to save / load -------------------------------------------------------------------------------------
    @property
    def should_save_model(self) -> bool:
        return "model" in self.checkpoint_save_contents

    @property
    def should_save_optimizer(self) -> bool:
        return "optimizer" in self.checkpoint_save_contents

    @property
    def should_save_extra(self) -> bool:
        return "extra" in self.checkpoint_save_contents

    @property
    def should_save_hf_model(self) -> bool:
        return "hf_model" in self.checkpoint_save_contents

    @property
    def should_load_model(self) -> bool:
        return "model" in self.checkpoint_load_contents

    @property
    def should_load_optimizer(self) -> bool:
        return "optimizer" in self.checkpoint_load_contents

    @property
    def should_load_extra(self) -> bool:
        return "extra" in self.checkpoint_load_contents

    @property
    def should_load_hf_model(self) -> bool:
        return "hf_model" in self.checkpoint_load_contents

    @property
    def should_save_lora_only(self) -> bool:
        """``checkpoint.save_lora_only``: a LoRA model saves its adapter tensors only (the base is the pretrained
        checkpoint, reloaded from ``model.path``)."""
        return bool(self.checkpoint_config.save_lora_only)

    @staticmethod
    def is_lora_only_state_dict(state_dict: dict[str, Any] | None) -> bool:
        """True when every key of a non-empty state dict names an adapter tensor (a LoRA-only checkpoint)."""
        if not state_dict:
            return False
        return all(any(marker in key for marker in _LORA_KEY_MARKERS) for key in state_dict)

    @staticmethod
    def lora_only(state_dict: dict[str, Any]) -> dict[str, Any]:
        """The adapter entries of ``state_dict``."""
        return {k: v for k, v in state_dict.items() if any(marker in k for marker in _LORA_KEY_MARKERS)}

    # -- layout-specific ------------------------------------------------------------------------------------------
    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement load_checkpoint")

    def save_checkpoint(
        self,
        local_path: str | None,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement save_checkpoint")

    # -- paths and retention --------------------------------------------------------------------------------------
    @staticmethod
    def checkpath(local_path: str | None, hdfs_path: str | None) -> tuple[bool, str]:
        """``(is_local, path)``: the local path when given, else the remote one."""
        if local_path is None and hdfs_path is None:
            raise ValueError("checkpoint: local_path and hdfs_path cannot both be None")
        return local_path is not None, local_path if local_path is not None else hdfs_path

    def remove_previous_save_local_path(self, path: str | list[str]) -> None:
        for p in [path] if isinstance(path, str) else path:
            abs_path = os.path.abspath(p)
            if os.path.exists(abs_path):
                logger.info("checkpoint manager: removing old checkpoint %s", abs_path)
                shutil.rmtree(abs_path, ignore_errors=True)

    def ensure_checkpoint_capacity(self, max_ckpt_to_keep: int | None) -> None:
        """Before a save: delete the oldest folders so that, with the new one, at most ``max_ckpt_to_keep`` exist.

        With a limit of 1 nothing is deleted here: the only good checkpoint stays until the new one is complete
        (``register_checkpoint`` removes it then).
        """
        if not (isinstance(max_ckpt_to_keep, int) and max_ckpt_to_keep > 1):
            return
        excess = len(self.previous_saved_paths) - max_ckpt_to_keep + 1
        if excess > 0:
            self.remove_previous_save_local_path(self.previous_saved_paths[:excess])
            self.previous_saved_paths = self.previous_saved_paths[excess:]

    def register_checkpoint(self, new_path: str, max_ckpt_to_keep: int | None) -> None:
        """After a complete save: remember ``new_path`` and delete the oldest folders beyond the limit."""
        self.previous_saved_paths.append(new_path)
        if not (isinstance(max_ckpt_to_keep, int) and max_ckpt_to_keep > 0):
            return
        excess = len(self.previous_saved_paths) - max_ckpt_to_keep
        if excess > 0:
            self.remove_previous_save_local_path(self.previous_saved_paths[:excess])
            self.previous_saved_paths = self.previous_saved_paths[excess:]

    # -- RNG --------------------------------------------------------------------------------------------------------
    @staticmethod
    def get_rng_state() -> dict[str, Any]:
        """torch (``cpu``), numpy, python (``random``) and, when CUDA is in use, ``cuda`` RNG states."""
        state: dict[str, Any] = {
            "cpu": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "random": random.getstate(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    @staticmethod
    def load_rng_state(rng_state: dict[str, Any]) -> None:
        """Restore what ``get_rng_state`` captured (also reads the worker managers' ``torch``/``python`` keys)."""
        torch.set_rng_state(rng_state["cpu"] if "cpu" in rng_state else rng_state["torch"])
        np.random.set_state(rng_state["numpy"])
        random.setstate(rng_state["random"] if "random" in rng_state else rng_state["python"])
        if "cuda" in rng_state and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng_state["cuda"])


def get_checkpoint_tracker_filename(root_path: str) -> str:
    """The tracker file under ``root_path``: it holds the step of the newest complete checkpoint."""
    return os.path.join(root_path, TRACKER_FILE)


def find_latest_ckpt_path(path: str | None, directory_format: str = "global_step_{}") -> str | None:
    """The folder the tracker file under ``path`` names (``directory_format`` filled with its step), or None when
    there is no tracker or the folder is gone."""
    if path is None:
        return None
    tracker = get_checkpoint_tracker_filename(path)
    if not os.path.exists(tracker):
        logger.info("no checkpoint tracker at %s", tracker)
        return None
    with open(tracker, "rb") as f:
        step = int(f.read().decode().strip())
    ckpt_path = os.path.join(path, directory_format.format(step))
    if not os.path.exists(ckpt_path):
        logger.warning("checkpoint tracker %s names step %d, but %s does not exist", tracker, step, ckpt_path)
        return None
    return ckpt_path


def should_save_ckpt_esi(max_steps_duration: float, save_ckpt_duration: float = 60, redundant_time: float = 0) -> bool:
    """True when the machine's capacity reservation (expiration in $MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP
    or $SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP, seconds since the epoch) ends before another step
    plus a save would finish: save now, or the work since the last checkpoint is lost."""
    budget = save_ckpt_duration + max_steps_duration + redundant_time
    mlp = os.getenv("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP")
    if mlp:
        try:
            remaining = float(mlp) - time.time()
        except ValueError:
            return False
        return remaining > 0 and max_steps_duration > 0 and remaining <= budget
    aws = os.getenv("SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP")
    if aws:
        remaining = (datetime.fromtimestamp(int(aws)) - datetime.now()).total_seconds()
        return remaining < budget
    return False
