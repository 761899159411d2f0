"""Least privilege for the sandbox child: another user, no capabilities, no_new_privs (standard library only;
imported by the bootstrap, which runs without the verl package).

:func:`drop_all` clears the bounding set first (so nothing executed later can regain a capability), then switches
to the unprivileged ``uid``/``gid`` when one is given (a root trainer's sandbox becomes ``nobody``: the kernel
clears every capability on that switch), then clears the effective, permitted and inheritable sets (ambient goes
with them) and sets ``no_new_privs``, so no setuid file can raise the process again.
"""

from __future__ import annotations

import ctypes
import os

_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_CAP_VERSION_3 = 0x20080522
_CAP_LAST_FALLBACK = 40
_CAP_SETPCAP = 8


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return _CAP_LAST_FALLBACK


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capability_sets() -> tuple[int, int, int]:
    """(effective, permitted, inheritable) of the calling thread, by capget (no /proc needed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sandbox: capget failed: {os.strerror(err)}")
    return tuple(
        getattr(data[0], name) | (getattr(data[1], name) << 32) for name in ("effective", "permitted", "inheritable")
    )


def _effective_caps() -> int:
    return capability_sets()[0]


def drop_all(uid: int | None = None, gid: int | None = None) -> None:
    """Clear the bounding set, become ``uid``/``gid`` (with no supplementary groups) when given, clear the other
    capability sets and set no_new_privs. Raises OSError (nothing is half-done that user code could exploit: the
    bootstrap refuses to run code after any failure)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if _effective_caps() & (1 << _CAP_SETPCAP):  # without it the bounding set stays, but no_new_privs holds
        for cap in range(_last_cap() + 1):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                err = ctypes.get_errno()
                if err not in (0, 22):  # EINVAL: a capability this kernel does not know
                    raise OSError(err, f"sandbox: prctl(PR_CAPBSET_DROP, {cap}) failed: {os.strerror(err)}")
    if uid is not None:
        gid = uid if gid is None else gid
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
            raise OSError(f"sandbox: switching to uid {uid} gid {gid} did not take")
    if _effective_caps():
        header = _CapHeader(_CAP_VERSION_3, 0)
        data = (_CapData * 2)()
        if libc.capset(ctypes.byref(header), data) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"sandbox: capset failed: {os.strerror(err)}")
        if _effective_caps():
            raise OSError("sandbox: capabilities are still set after capset")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sandbox: prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(err)}")
