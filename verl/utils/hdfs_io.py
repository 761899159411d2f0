"""``os``/``shutil`` file operations that also accept ``hdfs://`` paths (verl's ``verl.utils.hdfs_io``).

Local paths go to the standard library. HDFS paths go to the Hadoop command line (``hdfs dfs ...``), which must be
on ``PATH``; without it an HDFS operation raises :class:`FileNotFoundError` saying so, instead of failing silently.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from typing import Any

__all__ = ["copy", "exists", "is_non_local", "makedirs"]

logger = logging.getLogger(__name__)

HDFS_PREFIX = "hdfs://"


def is_non_local(path: str | os.PathLike) -> bool:
    """Whether ``path`` lives on HDFS (the only remote file system these helpers handle)."""
    return str(path).startswith(HDFS_PREFIX)


def _hdfs(*args: str, timeout: float | None = None, check: bool = True) -> int:
    """Run ``hdfs dfs <args>``; returns its exit code (raises ``OSError`` on failure when ``check``)."""
    binary = shutil.which("hdfs")
    if binary is None:
        raise FileNotFoundError(f"'hdfs dfs {' '.join(args)}' needs the Hadoop 'hdfs' command, which is not on PATH")
    result = subprocess.run([binary, "dfs", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise OSError(f"'hdfs dfs {' '.join(args)}' failed (exit {result.returncode}): {result.stderr.strip()}")
    return result.returncode


def exists(path: str, **kwargs: Any) -> bool:
    """``os.path.exists`` for local paths, ``hdfs dfs -test -e`` for HDFS paths."""
    if is_non_local(path):
        return _hdfs("-test", "-e", path, check=False, **kwargs) == 0
    return os.path.exists(path)


def makedirs(name: str, mode: int = 0o777, exist_ok: bool = False, **kwargs: Any) -> None:
    """``os.makedirs`` for local paths; ``hdfs dfs -mkdir -p`` for HDFS paths (which never fails on an existing
    folder, as in verl)."""
    if is_non_local(name):
        _hdfs("-mkdir", "-p", name, **kwargs)
    else:
        os.makedirs(name, mode=mode, exist_ok=exist_ok)


def copy(src: str, dst: str, **kwargs: Any) -> Any:
    """Copy a file (``shutil.copy``) or folder (``shutil.copytree``); with an HDFS side, ``hdfs dfs -cp/-put/-get``.

    Local copies return the destination path like ``shutil``; HDFS copies return True (and raise on failure).
    ``kwargs`` go to ``shutil`` locally and ``timeout`` (seconds) is honoured for HDFS.
    """
    if not (is_non_local(src) or is_non_local(dst)):
        if os.path.isdir(src):
            return shutil.copytree(src, dst, **kwargs)
        return shutil.copy(src, dst, **kwargs)
    timeout = kwargs.get("timeout")
    if is_non_local(src) and is_non_local(dst):
        _hdfs("-cp", "-f", src, dst, timeout=timeout)
    elif is_non_local(dst):
        _hdfs("-put", "-f", src, dst, timeout=timeout)
    else:
        _hdfs("-get", src, dst, timeout=timeout)
    return True
