"""``trainer.default_hdfs_dir``: a second copy of every complete checkpoint, on HDFS or in any other folder.

Checkpoints are written to ``trainer.default_local_dir``, usually a disk of the job's nodes. With
``trainer.default_hdfs_dir`` set, each checkpoint is copied there once it is complete (after its tracker file is
written): the ``global_step_<k>`` folder first, then the tracker file, so the mirror's tracker never names a folder
that is not all there. An ``hdfs://`` (or ``viewfs://``) address goes through the ``hdfs dfs`` command, which must
be on the PATH; anything else is a folder, for example a network mount. The mirror keeps every checkpoint (the
``max_*_ckpt_to_keep`` limits prune the local copies only), and a mirror folder has the local layout, so
``trainer.resume_from_path`` can name one of its ``global_step_<k>`` folders directly.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["CheckpointMirror"]

_HDFS_SCHEMES = ("hdfs://", "viewfs://")
_KEY = "trainer.default_hdfs_dir"


class CheckpointMirror:
    """Copies complete checkpoint folders to ``target`` (an HDFS address or a folder)."""

    def __init__(self, target: str) -> None:
        self.target = str(target).rstrip("/")
        self.on_hdfs = self.target.startswith(_HDFS_SCHEMES)
        if self.on_hdfs and shutil.which("hdfs") is None:
            raise RuntimeError(f"{_KEY}={target!r} needs the 'hdfs' command on the PATH to copy checkpoints there")
        if not self.on_hdfs:
            self.target = str(Path(self.target).expanduser())

    def copy(self, step_dir: Path, tracker: Path) -> None:
        """Copy ``step_dir`` and then ``tracker`` into the mirror; a failure names the key and what failed."""
        try:
            if self.on_hdfs:
                self._hdfs("-mkdir", "-p", self.target)
                self._hdfs("-put", "-f", str(step_dir), self.target)
                self._hdfs("-put", "-f", str(tracker), self.target)
            else:
                target = Path(self.target)
                target.mkdir(parents=True, exist_ok=True)
                shutil.copytree(step_dir, target / step_dir.name, dirs_exist_ok=True)
                shutil.copy2(tracker, target / tracker.name)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise RuntimeError(
                f"{_KEY}={self.target}: copying {step_dir} failed ({exc}); the checkpoint in "
                f"{step_dir.parent} is complete"
            ) from exc

    def _hdfs(self, *args: str) -> None:
        subprocess.run(["hdfs", "dfs", *args], check=True, capture_output=True, text=True)
