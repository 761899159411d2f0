"""Where the trainer's checkpoints live and which one a run resumes from.

Layout under `trainer.default_local_dir`::

    global_step_{k}/actor/          worker shards (torch.distributed.checkpoint) + huggingface/ export
    global_step_{k}/critic/
    global_step_{k}/trainer_state.pt  global step, dataloader position, weight version, KL coefficient
    latest_checkpointed_iteration.txt the step of the newest complete checkpoint

The tracker file is written last, so a run killed mid-save resumes from the previous complete checkpoint.
With ``trainer.del_local_ckpt_after_load`` the folder a run resumed from is deleted once it is loaded, and the
tracker moves back to the newest complete checkpoint left (or goes away when none is left). With
``trainer.default_hdfs_dir`` every complete checkpoint is also copied there (:mod:`checkpoint_mirror`).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from verl.trainer.ppo.checkpoint_mirror import CheckpointMirror
from verl.utils.config import omega_conf_to_dataclass

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STATE_FILE = "trainer_state.pt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
CRITIC_DIR = "critic"


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
        if self.step_dir(int(tracker.read_text().strip())).resolve() != step_dir.resolve():
            return
        complete = [step for step in self._steps() if (self.step_dir(step) / STATE_FILE).is_file()]
        if not complete:
            tracker.unlink()
            return
        self._write_tracker(complete[-1])

    def _write_tracker(self, step: int) -> None:
        """Point the tracker file at ``step`` atomically (a reader sees the old step or the new one)."""
        tmp = self.root / (TRACKER_FILE + ".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, self.root / TRACKER_FILE)

    def latest_step_dir(self) -> Path | None:
        tracker = self.root / TRACKER_FILE
        if not tracker.is_file():
            return None
        step_dir = self.step_dir(int(tracker.read_text().strip()))
        return step_dir if (step_dir / STATE_FILE).is_file() else None

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
