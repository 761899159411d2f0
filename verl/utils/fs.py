"""Turn a model or data path into a local one: verl's ``copy_to_local`` and its helpers.

Local paths and Hugging Face hub ids are returned as they are; ``hdfs://`` paths are copied once into a cache
folder (one sub-folder per source, guarded by a file lock so concurrent ranks copy once) and the local copy is
returned; ``use_shm=True`` additionally reads local folders from a shared-memory copy (:mod:`verl.utils.shm`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile

from verl.utils.hdfs_io import copy, exists, is_non_local, makedirs
from verl.utils.tiny_model import BUILTIN_TINY_MODEL, tiny_model_path

__all__ = [
    "copy",
    "copy_local_path_from_hdfs",
    "copy_to_local",
    "copy_to_shm",
    "exists",
    "get_local_temp_path",
    "is_non_local",
    "local_mkdir_safe",
    "makedirs",
    "md5_encode",
    "verify_copy",
]

logger = logging.getLogger(__name__)

# Lists a copied folder's entries, so a cache folder left half-written by a killed copy is detected and redone.
_MANIFEST = ".directory_record.txt"


def md5_encode(path: str) -> str:
    """A short stable name for ``path`` (cache folder and lock-file names)."""
    return hashlib.md5(path.encode()).hexdigest()


def get_local_temp_path(hdfs_path: str, cache_dir: str) -> str:
    """``cache_dir/<md5 of hdfs_path>/<basename>``: sources with the same basename never collide."""
    folder = os.path.join(cache_dir, md5_encode(hdfs_path))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, os.path.basename(hdfs_path))


def _entries(root: str) -> dict[str, int | None]:
    """Relative path -> size (None for folders) of everything under ``root``, manifest excluded."""
    found: dict[str, int | None] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), root)
            if rel != _MANIFEST:
                found[rel] = os.path.getsize(os.path.join(folder, name))
    return found


def verify_copy(src: str, dest: str) -> bool:
    """Whether ``dest`` holds a complete copy of ``src``: same kind, same entries, same file sizes."""
    if not (os.path.exists(src) and os.path.exists(dest)) or os.path.isfile(src) != os.path.isfile(dest):
        return False
    if os.path.isfile(src):
        return os.path.getsize(src) == os.path.getsize(dest)
    return _entries(src) == _entries(dest)


def copy_to_shm(src: str) -> str:
    """The shared-memory copy of the local file or folder ``src`` (made once per content; see :mod:`verl.utils.shm`)."""
    from verl.utils.shm import shm_copy

    return str(shm_copy(src))


def _write_manifest(folder: str) -> None:
    with open(os.path.join(folder, _MANIFEST), "w") as f:
        f.writelines(f"{rel}\n" for rel in sorted(_entries(folder)))


def _manifest_matches(folder: str) -> bool:
    path = os.path.join(folder, _MANIFEST)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return set(f.read().splitlines()) == set(_entries(folder))


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def copy_local_path_from_hdfs(
    src: str,
    cache_dir: str | None = None,
    filelock: str = ".file.lock",
    verbose: bool = False,
    always_recopy: bool = False,
) -> str:
    """A local path for ``src``: ``src`` itself unless it is on HDFS, else its copy under ``cache_dir`` (default:
    the system temp folder). ``always_recopy`` drops an existing copy first; an incomplete folder copy is redone.
    ``filelock`` is accepted for verl compatibility; the lock file is named after ``src``."""
    del filelock
    from filelock import FileLock

    if str(src).endswith("/"):
        raise ValueError(f"copy_to_local: remove the trailing '/' from {src!r}")
    if not is_non_local(src):
        return src
    cache_dir = cache_dir or tempfile.gettempdir()
    os.makedirs(cache_dir, exist_ok=True)
    local_path = get_local_temp_path(src, cache_dir)
    with FileLock(os.path.join(cache_dir, md5_encode(src) + ".lock")):
        if always_recopy:
            _remove(local_path)
        stale = os.path.isdir(local_path) and not _manifest_matches(local_path)
        if stale:
            _remove(local_path)
        if not os.path.exists(local_path):
            if verbose:
                logger.warning("copying %s to %s", src, local_path)
            copy(src, local_path)
            if os.path.isdir(local_path):
                _write_manifest(local_path)
    return local_path


def copy_to_local(
    src: str,
    cache_dir: str | None = None,
    filelock: str = ".file.lock",
    verbose: bool = False,
    always_recopy: bool = False,
    use_shm: bool = False,
) -> str:
    """A local path for ``src`` (see :func:`copy_local_path_from_hdfs`); with ``use_shm`` a local file or folder is
    then read from its shared-memory copy. A hub id stays a hub id (transformers downloads it). The built-in tiny
    model (``model.path=verl:tiny-demo``) is built on first use and its folder returned."""
    if src == BUILTIN_TINY_MODEL:
        src = str(tiny_model_path())
    local_path = copy_local_path_from_hdfs(src, cache_dir, filelock, verbose, always_recopy)
    if use_shm and os.path.exists(local_path):
        return copy_to_shm(local_path)
    return local_path


def local_mkdir_safe(path: str) -> str:
    """``os.makedirs(path, exist_ok=True)`` under a lock shared by all processes of the machine (checkpoint ranks
    create the same folder at once); returns the absolute path."""
    from filelock import FileLock, Timeout

    path = os.path.abspath(path)
    lock_path = os.path.join(tempfile.gettempdir(), f"ckpt_{md5_encode(path)[:8]}.lock")
    try:
        with FileLock(lock_path, timeout=60):
            os.makedirs(path, exist_ok=True)
    except Timeout:
        logger.warning("local_mkdir_safe: no lock on %s after 60 s; creating %s without it", lock_path, path)
        os.makedirs(path, exist_ok=True)
    return path
