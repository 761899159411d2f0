"""FSDPCheckpointManager: save and resume an FSDP2 worker's training state, and export a Hugging Face model.

Layout of one checkpoint folder (``local_path``, e.g. ``.../global_step_10/actor``)::

    dcp/                      model and optimizer shards (torch.distributed.checkpoint; any world size can load)
    lr_scheduler.pt           LR schedule state (identical on every rank, written by rank 0)
    rng_rank{r}.pt            torch / cuda / numpy / python RNG states and named generators of rank r
    extra_state.pt            global_step and the trainer's extra state (dataloader position, ...)
    huggingface/              config + tokenizer always; weights too when ``hf_model`` is in save_contents
    checkpoint_meta.json      what was saved, by how many ranks, at which step

What is saved and loaded follows ``checkpoint.save_contents`` / ``load_contents`` (model, optimizer, extra,
hf_model). Restoring model, optimizer, scheduler and RNG gives the same next update as never having stopped.
``checkpoint.save_lora_only`` on a LoRA model keeps only the adapter tensors in ``dcp/`` (the frozen base is the
pretrained model); loading such a checkpoint restores the adapters and keeps the model's base weights.

``checkpoint.async_save``: the model and optimizer shards are copied aside (staged) during ``save_checkpoint`` and
written by a background thread while training goes on. ``checkpoint_meta.json`` is written last, by
:meth:`~FSDPCheckpointManager.wait_for_save` (called by the trainer before its next save and at the end of
training, and by every save or load first), so a folder without it is never taken for a checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from verl.utils.checkpoint.checkpoint_manager import DEFAULT_CONTENTS, checkpoint_contents
from verl.utils.fsdp_utils.weights import has_lora

__all__ = ["FSDPCheckpointManager", "capture_rng_state", "restore_rng_state"]

logger = logging.getLogger(__name__)

_META_FILE = "checkpoint_meta.json"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def capture_rng_state(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Every random state a training step may draw from on this rank."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "generators": {name: gen.get_state() for name, gen in (generators or {}).items()},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    for name, gen in (generators or {}).items():
        if name in state.get("generators", {}):
            gen.set_state(state["generators"][name])


class FSDPCheckpointManager:
    """Save/load the state of one FSDP2 model (+ optimizer, LR scheduler, RNG) across all ranks of its group.

    Args:
        model: the FSDP2-wrapped module.
        optimizer / lr_scheduler: optional (a reference model has neither).
        processing_class: tokenizer saved into ``huggingface/``.
        checkpoint_config: ``actor.checkpoint`` (typed, a DictConfig or a dict): ``save_contents``,
            ``load_contents`` (default: ``save_contents``), ``async_save``, ``save_lora_only``.
        hf_config: the transformers config written into ``huggingface/``.
        export_weights: ``fn(out_dir)`` writing full Hugging Face weights; collective, called on every rank.
        generators: named ``torch.Generator`` objects (e.g. the mini-batch shuffler) saved with the RNG state.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        checkpoint_config: Any = None,
        hf_config: Any = None,
        export_weights: Callable[[str], None] | None = None,
        generators: dict[str, torch.Generator] | None = None,
        role: str = "actor",
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        self.hf_config = hf_config
        self.export_weights = export_weights
        self.generators = generators or {}
        self.role = role
        checkpoint_config = checkpoint_contents(checkpoint_config)
        save = list(checkpoint_config.save_contents or DEFAULT_CONTENTS)
        load = checkpoint_config.load_contents
        self.save_contents = save
        self.load_contents = list(load) if load is not None else list(save)
        self.previous_saved_paths: list[str] = []
        self.async_save = bool(checkpoint_config.async_save)
        self.save_lora_only = bool(checkpoint_config.save_lora_only)
        self._pending_save: tuple[Future, Callable[[], None], str] | None = None
        self._async_group: Any = None

    # ------------------------------------------------------------------ save

    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        extra_state: dict[str, Any] | None = None,
    ) -> str:
        """Write a checkpoint of every rank into ``local_path`` and prune to the newest ``max_ckpt_to_keep``
        (with ``async_save``: start writing it; :meth:`wait_for_save` completes it)."""
        self.wait_for_save()
        if hdfs_path is not None:
            logger.warning(
                "%s checkpoint: hdfs_path=%r is ignored here; the trainer copies complete checkpoints to "
                "trainer.default_hdfs_dir",
                self.role,
                hdfs_path,
            )
        local_path = os.path.abspath(os.path.expanduser(str(local_path)))
        rank = _rank()
        if rank == 0:
            os.makedirs(local_path, exist_ok=True)
        _barrier()
        os.makedirs(local_path, exist_ok=True)

        # An optimizer that has not stepped yet has no state; reading its state dict would initialise it (one
        # zero-lr step, so Adam's step count becomes 1) and change the next update. Save it as "fresh" instead.
        fresh_optimizer = self.optimizer is not None and not self.optimizer.state
        contents = [c for c in self.save_contents if not (c == "optimizer" and fresh_optimizer)]
        lora_only = self.save_lora_only and isinstance(self.model, nn.Module) and has_lora(self.model)
        state = self._dcp_state(contents, lora_only)
        shards = None
        if state:
            shard_dir = os.path.join(local_path, "dcp")
            if self.async_save:
                shards = dcp.async_save(state, checkpoint_id=shard_dir, process_group=self._background_group())
            else:
                dcp.save(state, checkpoint_id=shard_dir)
        if "optimizer" in self.save_contents and self.lr_scheduler is not None and rank == 0:
            torch.save(self.lr_scheduler.state_dict(), os.path.join(local_path, "lr_scheduler.pt"))
        if "extra" in self.save_contents:
            torch.save(capture_rng_state(self.generators), os.path.join(local_path, f"rng_rank{rank}.pt"))
            if rank == 0:
                torch.save(
                    {"global_step": int(global_step), "extra_state": extra_state},
                    os.path.join(local_path, "extra_state.pt"),
                )
        hf_dir = os.path.join(local_path, "huggingface")
        if "hf_model" in self.save_contents and self.export_weights is not None:
            self.export_weights(hf_dir)  # collective
        if rank == 0:
            self._save_hf_metadata(hf_dir)
        meta = {
            "global_step": int(global_step),
            "world_size": _world_size(),
            "contents": self.save_contents,
            "role": self.role,
            "fresh_optimizer": fresh_optimizer,
            "lora_only": lora_only,
        }

        def finish() -> None:
            if rank == 0:
                with open(os.path.join(local_path, _META_FILE), "w") as f:
                    json.dump(meta, f, indent=2)
            _barrier()
            self._prune(local_path, max_ckpt_to_keep)

        if shards is None:
            finish()
        else:
            self._pending_save = (shards, finish, local_path)
        return local_path

    def wait_for_save(self) -> bool:
        """Finish an asynchronous save still being written (collective); True if there was one."""
        if self._pending_save is None:
            return False
        shards, finish, local_path = self._pending_save
        self._pending_save = None
        try:
            shards.result()
        except Exception as exc:
            raise RuntimeError(
                f"{self.role} checkpoint {local_path!r}: writing the model and optimizer shards in "
                f"the background failed: {type(exc).__name__}: {exc}"
            ) from exc
        finish()
        return True

    def _background_group(self) -> Any:
        """A gloo group of its own for the background writer's collectives, so they never interleave with the
        training collectives on the default group (NCCL cannot serve a second thread either)."""
        if not dist.is_initialized():
            return None
        if self._async_group is None:
            self._async_group = dist.new_group(backend="gloo")
        return self._async_group

    def _save_hf_metadata(self, hf_dir: str) -> None:
        os.makedirs(hf_dir, exist_ok=True)
        if self.hf_config is not None:
            self.hf_config.save_pretrained(hf_dir)
        generation_config = getattr(_unwrap(self.model), "generation_config", None)
        if generation_config is not None:
            generation_config.save_pretrained(hf_dir)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(hf_dir)

    def _prune(self, local_path: str, max_ckpt_to_keep: int | None) -> None:
        if local_path in self.previous_saved_paths:
            self.previous_saved_paths.remove(local_path)
        self.previous_saved_paths.append(local_path)
        if max_ckpt_to_keep is None or max_ckpt_to_keep <= 0:
            return
        while len(self.previous_saved_paths) > max_ckpt_to_keep:
            old = self.previous_saved_paths.pop(0)
            if _rank() == 0 and os.path.isdir(old):
                shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------ load

    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> dict[str, Any]:
        """Restore what ``load_contents`` names from ``local_path``; returns ``{global_step, extra_state}``."""
        self.wait_for_save()
        if local_path is None:
            return {"global_step": 0, "extra_state": None}
        local_path = os.path.abspath(os.path.expanduser(str(local_path)))
        if not os.path.isdir(local_path):
            raise FileNotFoundError(f"{self.role} checkpoint {local_path!r} does not exist")
        meta = self._read_meta(local_path)
        saved = meta.get("contents", list(DEFAULT_CONTENTS))
        missing = [c for c in self.load_contents if c in ("model", "optimizer", "extra") and c not in saved]
        if missing:
            raise ValueError(
                f"{self.role} checkpoint {local_path!r} does not hold {missing} (it holds {saved}); "
                f"adjust {self.role}.checkpoint.load_contents"
            )
        want = [c for c in self.load_contents if c in ("model", "optimizer")]
        fresh_optimizer = "optimizer" in want and bool(meta.get("fresh_optimizer", False))
        lora_only = bool(meta.get("lora_only", False))
        state = self._dcp_state([c for c in want if not (c == "optimizer" and fresh_optimizer)], lora_only)
        if state:
            dcp.load(state, checkpoint_id=os.path.join(local_path, "dcp"))
            self._apply_dcp_state(state, strict=not lora_only)
        if fresh_optimizer and self.optimizer is not None:
            self.optimizer.state.clear()  # as saved: no step taken yet
        if "optimizer" in want and self.lr_scheduler is not None:
            sched_path = os.path.join(local_path, "lr_scheduler.pt")
            if os.path.isfile(sched_path):
                self.lr_scheduler.load_state_dict(torch.load(sched_path, weights_only=False))
        result: dict[str, Any] = {"global_step": int(meta.get("global_step", 0)), "extra_state": None}
        if "extra" in self.load_contents:
            rng_path = os.path.join(local_path, f"rng_rank{_rank()}.pt")
            if os.path.isfile(rng_path):
                restore_rng_state(torch.load(rng_path, weights_only=False), self.generators)
            else:
                logger.warning(
                    "%s checkpoint %s has no RNG state for rank %d (saved with %s ranks)",
                    self.role,
                    local_path,
                    _rank(),
                    meta.get("world_size"),
                )
            extra_path = os.path.join(local_path, "extra_state.pt")
            if os.path.isfile(extra_path):
                result.update(torch.load(extra_path, weights_only=False))
        _barrier()
        if del_local_after_load and _rank() == 0:
            shutil.rmtree(local_path, ignore_errors=True)
        return result

    def _read_meta(self, local_path: str) -> dict[str, Any]:
        path = os.path.join(local_path, _META_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{local_path!r} is not a {self.role} checkpoint written by FSDPCheckpointManager (no {_META_FILE})"
            )
        with open(path) as f:
            return json.load(f)

    # ------------------------------------------------------------------ DCP state

    def _dcp_state(self, contents: list[str], lora_only: bool = False) -> dict[str, Any]:
        """What goes through DCP: ``model`` (its adapter tensors alone when ``lora_only``) and ``optimizer``."""
        want_model = "model" in contents
        want_optim = "optimizer" in contents and self.optimizer is not None
        state: dict[str, Any] = {}
        if want_optim:
            model_sd, state["optimizer"] = get_state_dict(self.model, self.optimizer)
        elif want_model:
            model_sd = get_model_state_dict(self.model)
        if want_model:
            state["model"] = _adapters_only(model_sd) if lora_only else model_sd
        return state

    def _apply_dcp_state(self, state: dict[str, Any], strict: bool = True) -> None:
        options = StateDictOptions(strict=strict)
        if "optimizer" in state:
            model_sd = state.get("model")
            if model_sd is None:
                model_sd = get_model_state_dict(self.model)
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=model_sd,
                optim_state_dict=state["optimizer"],
                options=options,
            )
        elif "model" in state:
            set_model_state_dict(self.model, state["model"], options=options)


def _adapters_only(model_state: dict[str, Any]) -> dict[str, Any]:
    """The LoRA / adapter entries of a model state dict (peft names hold ``lora_`` or ``.adapter_``)."""
    kept = {k: v for k, v in model_state.items() if "lora_" in k or ".adapter_" in k}
    if not kept:
        raise ValueError(
            f"checkpoint.save_lora_only: none of the model's {len(model_state)} state-dict keys is a "
            "LoRA/adapter tensor"
        )
    return kept


def _unwrap(model: nn.Module) -> nn.Module:
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model
