"""Namespaces and the minimal root for the sandbox child (standard library only; imported by the bootstrap).

:func:`enter` moves the calling process into fresh namespaces: a user namespace first when the trainer is not
root, or is root without CAP_SYS_ADMIN (an unprivileged process may create one and holds capabilities only inside
it; its uid maps to itself, so files keep their owner), then mount + IPC + UTS namespaces, and a network namespace
whose only interface is a loopback that is down. :func:`build_root` then makes every inherited mount private
(nothing propagates back to the host), mounts a small tmpfs as the new root, binds into it read-only the folders
of the plan (:mod:`verl.tools.sandbox.plan`), covers site-packages with an empty tmpfs, mounts the run's folder at
``/sandbox`` (a size-limited tmpfs: nosuid, nodev, noexec), pivots into it, detaches the old root and makes the
new root read-only. What was not bound is not there: no ``/etc/passwd``, no home folders, no ``/proc``, no ``/tmp``,
no ``/dev/shm``.
"""

from __future__ import annotations

import ctypes
import errno
import os

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x200000
MNT_DETACH = 0x2
# statvfs f_flag bit -> mount flag that a remount must keep (the kernel locks them on mounts a user namespace
# inherits, and refuses a remount that would clear one)
_KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"sandbox namespaces: {what} failed: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


_state = {"user_namespace": False}


def in_user_namespace() -> bool:
    """True once :func:`enter` created a user namespace for this process."""
    return _state["user_namespace"]


def _enter_user_namespace(libc: ctypes.CDLL, also: tuple[int, int] | None) -> None:
    """Unshare a user namespace mapping the caller's uid/gid to themselves. A process may write only that one
    line for itself; ``also`` (uid, gid) is mapped too by a helper forked beforehand, which stays in the parent
    namespace and may write more lines when it has CAP_SETUID/CAP_SETGID there (root without CAP_SYS_ADMIN)."""
    uid, gid = os.geteuid(), os.getegid()
    if also is None or also == (uid, gid):
        if libc.unshare(CLONE_NEWUSER) != 0:
            _fail("unshare(CLONE_NEWUSER) (are unprivileged user namespaces disabled?)")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    else:
        _map_by_helper(libc, uid, gid, also)
    _state["user_namespace"] = True


def _map_by_helper(libc: ctypes.CDLL, uid: int, gid: int, also: tuple[int, int]) -> None:
    me = os.getpid()
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    helper = os.fork()
    if helper == 0:  # the helper: wait for the unshare, write both maps, report, leave
        status = b"no unshare"
        try:
            os.close(go_write)
            os.close(done_read)
            if os.read(go_read, 1) == b"u":
                _write(f"/proc/{me}/uid_map", f"{uid} {uid} 1\n{also[0]} {also[0]} 1\n")
                _write(f"/proc/{me}/gid_map", f"{gid} {gid} 1\n{also[1]} {also[1]} 1\n")
                status = b"ok"
        except OSError as err:
            status = str(err).encode()
        finally:
            os.write(done_write, status)
            os._exit(0)
    os.close(go_read)
    os.close(done_write)
    try:
        unshared = libc.unshare(CLONE_NEWUSER) == 0
        err = ctypes.get_errno()
        os.write(go_write, b"u" if unshared else b"x")
        status = os.read(done_read, 4096)
    finally:
        os.close(go_write)
        os.close(done_read)
        os.waitpid(helper, 0)
    if not unshared:
        raise OSError(err, f"sandbox namespaces: unshare(CLONE_NEWUSER) failed: {os.strerror(err)}")
    if status != b"ok":
        raise OSError(f"sandbox namespaces: mapping uid {also[0]} in the user namespace failed: {status.decode()}")


def enter(*, user: bool | None, mount: bool, network: bool, also: tuple[int, int] | None = None) -> None:
    """Unshare the mount (+ IPC, UTS) and/or network namespaces. ``user``: True creates a user namespace first
    (a non-root trainer; the caller's uid and gid map to themselves); None creates one only when the kernel
    refuses the others (root without CAP_SYS_ADMIN, as in many containers), mapping ``also`` (the sandbox's
    uid, gid) as well; False never. Raises OSError naming the call that failed."""
    libc = _libc()
    if user and not in_user_namespace():
        _enter_user_namespace(libc, None)
    flags = (CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS if mount else 0) | (CLONE_NEWNET if network else 0)
    if not flags or libc.unshare(flags) == 0:
        return
    if user is None and ctypes.get_errno() == errno.EPERM and not in_user_namespace():
        _enter_user_namespace(libc, also)
        if libc.unshare(flags) == 0:
            return
    _fail(
        f"unshare({'mount, ipc, uts' if mount else ''}{', ' if mount and network else ''}"
        f"{'net' if network else ''} namespaces)"
    )


def _mount(
    libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    def encode(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    if libc.mount(encode(source), target.encode(), encode(fstype), flags, encode(data)) != 0:
        _fail(f"mount {source or fstype or ''} on {target}")


def _remount(libc: ctypes.CDLL, target: str, extra: int) -> None:
    """Remount the bind mount at ``target`` with ``extra`` flags added to the ones it has."""
    kept = os.statvfs(target).f_flag
    flags = MS_REMOUNT | MS_BIND | extra
    for bit, flag in _KEPT_FLAGS:
        if kept & bit:
            flags |= flag
    _mount(libc, None, target, None, flags)


def _mountpoint(path: str, like: str) -> None:
    if os.path.isdir(like):
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def build_root(plan: dict, new_root: str, folder_mb: int, owner: tuple[int, int]) -> None:
    """Build the minimal root described by ``plan`` on ``new_root`` (an empty folder) and pivot into it. The run's
    folder (``plan["folder"]``) is a fresh tmpfs of ``folder_mb`` MiB owned by ``owner`` (uid, gid): bounded, in
    memory, gone with the process. The process's cwd becomes ``/`` (the caller moves to its folder)."""
    libc = _libc()
    machine = os.uname().machine
    if machine not in _SYS_PIVOT_ROOT:
        raise OSError(f"sandbox namespaces: pivot_root is not known for machine {machine!r}")
    os.umask(0o022)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for source, destination, writable in plan["binds"]:
        target = new_root + destination
        _mountpoint(target, source)
        _mount(libc, source, target, None, MS_BIND | MS_REC)
        if not writable:
            _remount(libc, target, MS_RDONLY)
        elif os.path.isdir(source):  # the run's folder: writable, but nothing in it runs or is a device
            _remount(libc, target, MS_NOSUID | MS_NODEV | MS_NOEXEC)
    folder = new_root + plan["folder"]
    os.makedirs(folder, mode=0o700, exist_ok=True)
    _mount(
        libc,
        "tmpfs",
        folder,
        "tmpfs",
        MS_NOSUID | MS_NODEV | MS_NOEXEC,
        f"size={int(folder_mb)}m,mode=0700,uid={int(owner[0])},gid={int(owner[1])}",
    )
    for path, target in plan["symlinks"]:
        os.symlink(target, new_root + path)
    for folder in plan["hide"]:
        _mount(
            libc, "tmpfs", new_root + folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "mode=0755,size=4k"
        )
    put_old = new_root + "/.old-root"
    os.mkdir(put_old, 0o700)
    if libc.syscall(ctypes.c_long(_SYS_PIVOT_ROOT[machine]), new_root.encode(), put_old.encode()) != 0:
        _fail("pivot_root")
    os.chdir("/")
    if libc.umount2(b"/.old-root", MNT_DETACH) != 0:
        _fail("umount of the old root")
    os.rmdir("/.old-root")
    _remount(libc, "/", MS_RDONLY)
