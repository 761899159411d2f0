"""Where the trainer's checkpoints live and which one a run resumes from.

Layout under `trainer.default_local_dir`::

    global_step_{k}/actor/          worker shards (torch.distributed.checkpoint) + huggingface/ export
    global_step_{k}/critic/
    global_step_{k}/trainer_state.pt  global step, dataloader position, weight version, KL coefficient
    latest_checkpointed_iteration.txt the step of the newest complete checkpoint

The tracker file is written last, so a run killed mid-save resumes from the previous complete checkpoint. With
``resume_mode=auto`` a latest checkpoint that cannot be loaded (a corrupt or truncated file) gives way to the
previous complete one, with a warning naming both (:meth:`TrainerCheckpointer.resume_candidates`); an unreadable
tracker gives way to the newest complete folder.
With ``trainer.del_local_ckpt_after_load`` the folder a run resumed from is deleted once it is loaded, and the
tracker moves back to the newest complete checkpoint left (or goes away when none is left). With
``trainer.default_hdfs_dir`` every complete checkpoint is also copied there (:mod:`checkpoint_mirror`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from verl.trainer.ppo.checkpoint_mirror import CheckpointMirror
from verl.utils.config import omega_conf_to_dataclass

logger = logging.getLogger(__name__)

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STATE_FILE = "trainer_state.pt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
CRITIC_DIR = "critic"


_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM}
_STORAGE_TEXTS = (
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
    "File too large",
    "Permission denied",
)


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written (full disk, quota, read-only or forbidden folder); the previous complete
    checkpoint is untouched."""


def storage_failure(exc: BaseException) -> str | None:
    """The storage fault behind ``exc`` (an ``OSError`` anywhere in its chain, or a worker's error text naming
    one), else None: what makes a failed save the disk's fault rather than the program's."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _STORAGE_ERRNOS:
            return f"{os.strerror(current.errno)}" + (f" ({current.filename})" if current.filename else "")
        text = str(current)
        for marker in _STORAGE_TEXTS:
            if marker in text:
                return marker
        current = current.__cause__ or current.__context__ or getattr(current, "cause", None)
    return None


def _newest(steps: list[int], limit: int | None) -> set[int]:
    """The last ``limit`` of ``steps`` (all of them when the limit is unset or not positive)."""
    if not limit or int(limit) <= 0:
        return set(steps)
    return set(steps[-int(limit) :])


class TrainerCheckpointer:
    def __init__(self, trainer_config: Any):
        """``trainer_config``: the typed ``trainer`` group, or a mapping of its keys (validated into one)."""
        from verl.trainer.config.trainer_config import TrainerConfig

        if not isinstance(trainer_config, TrainerConfig):
            trainer_config = omega_conf_to_dataclass(trainer_config, TrainerConfig, path="trainer", keep_unknown=True)
        self.root = Path(os.path.expanduser(str(trainer_config.default_local_dir)))
        self.resume_mode = trainer_config.resume_mode
        self.resume_from_path = trainer_config.resume_from_path
        self.max_to_keep = trainer_config.max_actor_ckpt_to_keep
        critic_limit = trainer_config.max_critic_ckpt_to_keep
        self.max_critic_to_keep = self.max_to_keep if critic_limit is None else critic_limit
        self.del_after_load = trainer_config.del_local_ckpt_after_load
        mirror = trainer_config.default_hdfs_dir
        self.mirror = CheckpointMirror(mirror) if mirror else None

    def step_dir(self, step: int) -> Path:
        return self.root / f"global_step_{step}"

    def _storage_state(self) -> str | None:
        """A full or unwritable checkpoint folder, seen from outside: torch's zip writer reports a short write as
        "unexpected pos ..." rather than the disk's own error, so the free space is what tells."""
        folder = self.root if self.root.exists() else self.root.parent
        if not os.access(folder, os.W_OK):
            return f"no write access to {folder}"
        free = shutil.disk_usage(folder).free
        previous = self.latest_step_dir()
        needed = sum(f.stat().st_size for f in previous.rglob("*") if f.is_file()) if previous else 16 << 20
        if free < needed:
            return f"No space left on device ({free} bytes free, a checkpoint takes about {needed})"
        return None

    def save_failed(self, step: int, exc: BaseException) -> CheckpointSaveError | None:
        """For a save of ``step`` that failed on storage: remove its partial folder (never a complete or tracked
        one) and return the error to raise, naming the folder, the fault and the checkpoint a rerun resumes from;
        None when the failure is not a storage fault (the caller re-raises it as it is)."""
        fault = storage_failure(exc) or self._storage_state()
        if fault is None:
            return None
        step_dir = self.step_dir(step)
        if self._tracked_step() != step and not (step_dir / STATE_FILE).is_file():
            shutil.rmtree(step_dir, ignore_errors=True)
        previous = self.latest_step_dir()
        resume = (
            f"the last complete checkpoint, {previous}, is intact and trainer.resume_mode=auto resumes from it"
            if previous is not None
            else "no complete checkpoint exists yet"
        )
        return CheckpointSaveError(
            f"saving the checkpoint of step {step} to {step_dir} failed: {fault}. trainer.default_local_dir="
            f"{self.root} has no room (or no write access) for it; the partial folder was removed and {resume}. Free "
            "space or point trainer.default_local_dir elsewhere, then rerun."
        )

    def save_trainer_state(self, step: int, state: dict[str, Any]) -> None:
        step_dir = self.step_dir(step)
        step_dir.mkdir(parents=True, exist_ok=True)
        torch.save({"global_step": step, **state}, step_dir / STATE_FILE)
        self._write_tracker(step)
        if self.mirror is not None:
            self.mirror.copy(step_dir, self.root / TRACKER_FILE)
        self._prune()

    def _steps(self) -> list[int]:
        """Steps of the ``global_step_*`` folders under the root, oldest first (complete or not)."""
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name)))

    def _prune(self) -> None:
        """Keep the newest ``max_actor_ckpt_to_keep`` folders whole, and the critic shards of the newest
        ``max_critic_ckpt_to_keep`` (unset: the actor's limit); a folder with nothing left to keep goes entirely."""
        steps = self._steps()
        whole = _newest(steps, self.max_to_keep)
        critic = _newest(steps, self.max_critic_to_keep)
        for step in steps:
            folder = self.step_dir(step)
            if step in whole:
                if step not in critic:
                    shutil.rmtree(folder / CRITIC_DIR, ignore_errors=True)
            elif step in critic and (folder / CRITIC_DIR).is_dir():
                for child in folder.iterdir():  # the trainer state and actor shards go: this folder is not resumable
                    if child.name != CRITIC_DIR:
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
            else:
                shutil.rmtree(folder, ignore_errors=True)

    def delete_loaded(self, step_dir: str | os.PathLike) -> None:
        """Delete the folder a run resumed from (``trainer.del_local_ckpt_after_load``).

        A tracker naming that folder is moved back to the newest complete checkpoint left, or removed, so that it
        never names a missing folder and a restart before the next save resumes from what is still on disk.
        """
        step_dir = Path(step_dir)
        shutil.rmtree(step_dir, ignore_errors=True)
        tracker = self.root / TRACKER_FILE
        if step_dir.parent.resolve() != self.root.resolve() or not tracker.is_file():
            return
        tracked = self._tracked_step()
        if tracked is None or self.step_dir(tracked).resolve() != step_dir.resolve():
            return
        complete = self.complete_steps()
        if not complete:
            tracker.unlink()
            return
        self._write_tracker(complete[-1])

    def _write_tracker(self, step: int) -> None:
        """Point the tracker file at ``step`` atomically (a reader sees the old step or the new one)."""
        tmp = self.root / (TRACKER_FILE + ".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, self.root / TRACKER_FILE)

    def _tracked_step(self) -> int | None:
        """The step the tracker names; None without a tracker or, with a warning, when it holds no step number."""
        tracker = self.root / TRACKER_FILE
        if not tracker.is_file():
            return None
        text = tracker.read_text().strip()
        if not text.isdigit():
            logger.warning("%s holds %r, not a step number; using the newest complete checkpoint", tracker, text[:40])
            complete = self.complete_steps()
            return complete[-1] if complete else None
        return int(text)

    def complete_steps(self) -> list[int]:
        """Steps whose folder holds the trainer state (written after every worker's files), oldest first."""
        return [step for step in self._steps() if (self.step_dir(step) / STATE_FILE).is_file()]

    def latest_step_dir(self) -> Path | None:
        step = self._tracked_step()
        if step is None:
            return None
        step_dir = self.step_dir(step)
        return step_dir if (step_dir / STATE_FILE).is_file() else None

    def resume_candidates(self) -> list[Path]:
        """The folders to try in order: ``auto``: the tracked checkpoint, then the older complete ones, newest first
        (a checkpoint that fails to load gives way to the one before it); ``resume_path``: that folder alone;
        ``disable``: none."""
        first = self.find_resume_dir()
        if first is None or self.resume_mode != "auto":
            return [] if first is None else [first]
        tracked = int(first.name.removeprefix("global_step_"))
        older = [self.step_dir(step) for step in reversed(self.complete_steps()) if step < tracked]
        return [first, *older]

    def find_resume_dir(self) -> Path | None:
        """`disable`: start fresh; `auto`: newest complete checkpoint if any; `resume_path`: the given folder."""
        if self.resume_mode == "disable":
            return None
        if self.resume_mode == "auto":
            return self.latest_step_dir()
        step_dir = Path(os.path.expanduser(str(self.resume_from_path)))
        if not _STEP_DIR.match(step_dir.name) or not (step_dir / STATE_FILE).is_file():
            raise FileNotFoundError(
                f"trainer.resume_from_path={self.resume_from_path} is not a global_step_<k> checkpoint folder "
                f"with {STATE_FILE}"
            )
        return step_dir

    @staticmethod
    def load_trainer_state(step_dir: str | os.PathLike) -> dict[str, Any]:
        return torch.load(Path(step_dir) / STATE_FILE, weights_only=False)
