"""Drop every Linux capability of the sandbox child (standard library only; loaded by path by the bootstrap).

A root sandbox keeps uid 0 (the interpreter under /root must stay readable) but loses what makes root powerful:
no mounts, no raw sockets, no module loading, no bypassing file permissions, no ptrace of processes it does not
own. The bounding set is cleared first, so nothing executed later can regain a capability.
"""

from __future__ import annotations

import ctypes
import os

_PR_CAPBSET_DROP = 24
_CAP_VERSION_3 = 0x20080522
_CAP_LAST_FALLBACK = 40


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return _CAP_LAST_FALLBACK


def _effective_caps() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 1  # unknown: try to drop


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all() -> None:
    """Clear the bounding, effective, permitted and inheritable sets (and ambient, implied). Raises OSError."""
    if not _effective_caps():
        return  # an unprivileged process: nothing to drop (no_new_privs keeps exec from granting any)
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(_last_cap() + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err not in (0, 22):  # EINVAL: a capability this kernel does not know
                raise OSError(err, f"sandbox: prctl(PR_CAPBSET_DROP, {cap}) failed: {os.strerror(err)}")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sandbox: capset failed: {os.strerror(err)}")
