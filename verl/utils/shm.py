"""Copies of checkpoints and data files in shared memory (``model.use_shm``, ``data.use_shm``).

Every process of a node (actor ranks, rollout servers, agent-loop workers) reads the model folder; from a network
file system that is one slow read per process. With ``use_shm`` the first process copies the file or folder into
``/dev/shm/verl/`` (``$VERL_SHM_DIR`` overrides it) and every later reader, in this run or the next, gets that copy.

A copy is named after the source's absolute path and the names, sizes and modification times of its files, so a
changed source gets a new copy and an unchanged one is never copied twice. Copies are written under a temporary
name and renamed into place, so a reader never sees half a copy, even when several processes race to make it. They
stay in memory after the run (that is what makes the next start fast): remove ``/dev/shm/verl`` to free it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from pathlib import Path

__all__ = ["maybe_shm_copy", "shm_copy", "shm_root"]

logger = logging.getLogger(__name__)

_DEFAULT_ROOT = "/dev/shm/verl"


def shm_root() -> Path:
    return Path(os.environ.get("VERL_SHM_DIR", _DEFAULT_ROOT))


def _fingerprint(source: Path) -> str:
    digest = hashlib.sha256(str(source).encode())
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        stat = path.stat()
        digest.update(
            f"\0{path.relative_to(source) if path != source else ''}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()
        )
    return digest.hexdigest()[:16]


def shm_copy(source: str | os.PathLike) -> Path:
    """The shared-memory copy of the file or folder ``source``, made now if there is none for its current content."""
    source = Path(source).expanduser().resolve()
    if not source.exists():
        raise FileNotFoundError(f"use_shm: {source} does not exist")
    target = shm_root() / _fingerprint(source) / source.name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{source.name}.{uuid.uuid4().hex}.partial"
    try:
        if source.is_dir():
            shutil.copytree(source, partial)
        else:
            shutil.copy2(source, partial)
        os.rename(partial, target)  # atomic; fails if another process renamed its copy first
    except OSError:
        if not target.exists():
            raise
    finally:
        if partial.exists():
            shutil.rmtree(partial) if partial.is_dir() else partial.unlink()
    logger.info("use_shm: copied %s to %s", source, target)
    return target


def maybe_shm_copy(source: str | os.PathLike, enabled: bool, key: str) -> str:
    """``source`` itself, or its shared-memory copy when ``enabled`` (the ``key`` that asked for it is named in
    the warning when this machine has no shared-memory folder)."""
    if not enabled:
        return str(source)
    root = shm_root()
    if not root.parent.is_dir():
        logger.warning("%s=true but %s does not exist on this machine; reading %s in place", key, root.parent, source)
        return str(source)
    return str(shm_copy(source))
