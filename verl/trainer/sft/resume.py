"""SFT checkpoints in verl's layout, so a run can resume and ``python -m verl.model_merger`` can read it.

Layout under ``trainer.default_local_dir``::

    global_step_{k}/                    one save; what ``checkpoint.save_contents`` names
        dcp/                            model / optimizer shards (the PPO actor's FSDPCheckpointManager format)
        lr_scheduler.pt, rng_rank{r}.pt, extra_state.pt
        huggingface/                    config + tokenizer always; full weights with ``hf_model``
        lora_train_meta.json            LoRA rank and alpha, when adapters are trained (read by the merger)
        checkpoint_meta.json            written last: a folder without it is not a checkpoint
    latest_checkpointed_iteration.txt   the newest complete step, updated after the folder is complete

The same manager as the PPO actor writes the shards, so SFT and RL checkpoints are read the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch import nn

from verl.base_config import ConfigError
from verl.trainer.ppo.checkpointing import TRACKER_FILE
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager

__all__ = ["LORA_META_FILE", "SFTCheckpointer", "step_of"]

LORA_META_FILE = "lora_train_meta.json"
_META_FILE = "checkpoint_meta.json"
_STEP_DIR = re.compile(r"global_step_(\d+)")


def step_of(path: str | os.PathLike) -> int | None:
    """The ``k`` of a ``.../global_step_{k}`` folder, or None when the name carries no step."""
    match = _STEP_DIR.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


@contextlib.contextmanager
def _quiet_single_process() -> Iterator[None]:
    # torch.distributed.checkpoint warns on every call made outside a process group; here that is intended.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.distributed is disabled.*")
        yield


class SFTCheckpointer:
    """Writes, finds and loads ``global_step_{k}`` folders for one SFT run (collective under torchrun).

    Args:
        trainer_config: the ``trainer`` group (default_local_dir, resume_mode, resume_from_path, max_ckpt_to_keep,
            default_hdfs_dir).
        checkpoint_config: ``save_contents`` / ``load_contents``.
        export_weights: ``fn(out_dir)`` writing full Hugging Face weights; called on every rank with ``hf_model``.
        lora_meta: ``{"r", "lora_alpha", "task_type"}`` when LoRA adapters are trained.
    """

    def __init__(
        self,
        trainer_config: Any,
        checkpoint_config: Any,
        model: nn.Module,
        optimizer: Any,
        lr_scheduler: Any,
        tokenizer: Any,
        hf_config: Any,
        export_weights: Callable[[str], None],
        *,
        is_main: bool,
        lora_meta: dict[str, Any] | None = None,
    ) -> None:
        self.root = Path(os.path.expanduser(str(trainer_config.default_local_dir)))
        self.resume_mode = trainer_config.resume_mode
        self.resume_from_path = trainer_config.resume_from_path
        self.max_to_keep = trainer_config.max_ckpt_to_keep
        self.is_main = is_main
        self.lora_meta = lora_meta
        self.mirror = None
        if trainer_config.default_hdfs_dir:
            from verl.trainer.ppo.checkpoint_mirror import CheckpointMirror

            self.mirror = CheckpointMirror(trainer_config.default_hdfs_dir)
        self.manager = FSDPCheckpointManager(
            model,
            optimizer,
            lr_scheduler,
            processing_class=tokenizer,
            checkpoint_config=checkpoint_config,
            hf_config=hf_config,
            export_weights=export_weights,
            role="sft",
        )
        self._pending: int | None = None

    def step_dir(self, step: int) -> Path:
        return self.root / f"global_step_{step}"

    def save(self, step: int, extra_state: dict[str, Any] | None = None) -> Path:
        """Write ``global_step_{step}`` (every rank calls), then point the tracker at it.

        With ``checkpoint.async_save`` the shards are written in the background; the tracker moves (and the mirror
        copies) once :meth:`wait` has seen them complete."""
        self.wait()
        step_dir = self.step_dir(step)
        with _quiet_single_process():
            self.manager.save_checkpoint(
                str(step_dir), global_step=step, max_ckpt_to_keep=self.max_to_keep, extra_state=extra_state
            )
        if self.is_main and self.lora_meta is not None:
            (step_dir / LORA_META_FILE).write_text(json.dumps(self.lora_meta, indent=2) + "\n")
        self._pending = step
        if not self.manager.async_save:
            self._complete()
        return step_dir

    def wait(self) -> None:
        """Finish a save still being written in the background (collective), then update the tracker."""
        with _quiet_single_process():
            self.manager.wait_for_save()
        self._complete()

    def _complete(self) -> None:
        step, self._pending = self._pending, None
        if step is None or not self.is_main:
            return
        tmp = self.root / (TRACKER_FILE + ".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, self.root / TRACKER_FILE)
        if self.mirror is not None:
            self.mirror.copy(self.step_dir(step), self.root / TRACKER_FILE)

    def latest(self) -> Path | None:
        """The complete checkpoint the tracker names, if any."""
        tracker = self.root / TRACKER_FILE
        if not tracker.is_file():
            return None
        step_dir = self.step_dir(int(tracker.read_text().strip()))
        return step_dir if (step_dir / _META_FILE).is_file() else None

    def find_resume_dir(self) -> Path | None:
        """``disable``: none; ``auto``: ``resume_from_path`` if set, else the newest checkpoint (or none);
        ``resume_path``: ``resume_from_path``, which must be a complete ``global_step_<k>`` folder."""
        if self.resume_mode == "disable":
            return None
        if self.resume_mode == "auto" and not self.resume_from_path:
            return self.latest()
        path = Path(os.path.expanduser(str(self.resume_from_path)))
        if step_of(path) is None:
            raise ConfigError(
                f"{self.resume_from_path!r} must be a global_step_<k> folder", key="trainer.resume_from_path"
            )
        if not (path / _META_FILE).is_file():
            raise ConfigError(
                f"{self.resume_from_path!r} is not a complete SFT checkpoint (no {_META_FILE})",
                key="trainer.resume_from_path",
            )
        return path

    def load(self, step_dir: Path) -> dict[str, Any]:
        """Restore what ``load_contents`` names; returns ``{"global_step", "extra_state"}``."""
        with _quiet_single_process():
            return self.manager.load_checkpoint(str(step_dir))
