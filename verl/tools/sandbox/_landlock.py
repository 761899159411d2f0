"""Landlock for the sandbox child: read only what the interpreter needs, write only in the run's folder, execute
nothing, no TCP, no signals to the outside.

Standard library only (ctypes + raw syscalls); imported by the sandbox bootstrap. Landlock is an unprivileged
Linux security module (kernel 5.13+); each ABI version adds rights, and :func:`restrict` handles every right the
running kernel knows, so whatever no rule grants is denied, and reports which parts applied:

- ``fs`` (ABI 1+): reading files and listing directories only beneath the ``read`` paths, creating, writing,
  truncating, renaming or removing only beneath the ``write`` paths, executing only beneath the ``exec`` paths
  (none unless subprocesses are allowed).
- ``net`` (ABI 4+): TCP bind and connect are denied.
- ``scope`` (ABI 6+): signals to processes outside the sandbox and abstract unix sockets are denied.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same numbers on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem rights (linux/landlock.h) and the ABI that introduced them
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = (
    (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
)  # remove_dir/file, make_char/dir/reg/sock/fifo/block/sym
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_IOCTL_DEV = 1 << 15  # ABI 5
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | _TRUNCATE | _IOCTL_DEV  # the rights a rule on a non-directory takes
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = READ_FILE | READ_DIR
WRITE = WRITE_FILE | _MAKE_AND_REMOVE | _REFER | _TRUNCATE


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled (or blocked by a seccomp policy)."""
    libc = _libc()
    version = libc.syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(int(version), 0)


def handled_fs_rights(abi: int) -> int:
    """Every filesystem right ABI ``abi`` knows (the ruleset handles them all: no rule, no access)."""
    return (
        EXECUTE
        | READ
        | WRITE_FILE
        | _MAKE_AND_REMOVE
        | (_REFER if abi >= 2 else 0)
        | (_TRUNCATE if abi >= 3 else 0)
        | (_IOCTL_DEV if abi >= 5 else 0)
    )


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sandbox landlock: {what} failed: {os.strerror(err)}")
    return result


def restrict(rules: list[tuple[str, int]], *, block_tcp: bool = True, scope: bool = True) -> list[str]:
    """Apply a ruleset granting each ``(path, rights)`` beneath ``path`` (rights: ``READ``, ``WRITE``, ``EXECUTE``
    or'ed) and nothing anywhere else, to the calling process (irreversible, inherited). Paths that do not exist are
    skipped. Returns the parts that applied (subset of ``fs``, ``net``, ``scope``). Raises OSError when Landlock is
    unavailable or a call fails."""
    abi = abi_version()
    if abi < 1:
        raise OSError("sandbox landlock: not supported by this kernel")
    fs_rights = handled_fs_rights(abi)
    net_rights = (_NET_BIND_TCP | _NET_CONNECT_TCP) if block_tcp and abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if scope and abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", fs_rights, net_rights, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", fs_rights, net_rights)
    else:
        attr = struct.pack("=Q", fs_rights)
    libc = _libc()
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(
        libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
        "create_ruleset",
    )
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                granted = rights & fs_rights
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    granted &= _FILE_ONLY
                if not granted:
                    continue
                rule = ctypes.create_string_buffer(struct.pack("=Qi", granted, fd), 12)
                _check(
                    libc.syscall(
                        ctypes.c_long(_SYS_ADD_RULE),
                        ctypes.c_int(ruleset),
                        ctypes.c_int(_RULE_PATH_BENEATH),
                        rule,
                        ctypes.c_uint32(0),
                    ),
                    f"add_rule {path}",
                )
            finally:
                os.close(fd)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(
            libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)), "restrict_self"
        )
    finally:
        os.close(ruleset)
    return ["fs"] + (["net"] if net_rights else []) + (["scope"] if scoped else [])
