"""A seccomp-BPF filter for the sandbox child: no new processes, no sockets, no reaching other processes.

Standard library only (ctypes + prctl): the sandbox bootstrap loads this file by path before any user code runs,
and the filter is inherited by everything the child executes afterwards. It is the kernel-level layer that still
holds when user code bypasses Python (ctypes, an ``exec`` of a shell) and when the sandbox runs as root, where the
kernel does not enforce ``RLIMIT_NPROC``.

Denied (the call fails with an errno, the process lives on and can report it); the process and network rules
apply only when asked for (the defaults):

- ``fork``/``vfork`` and ``clone`` without ``CLONE_THREAD`` -> EPERM (threads stay allowed);
- ``clone3`` and ``io_uring_setup`` -> ENOSYS (clone3 flags live in memory a filter cannot read, and glibc falls
  back to ``clone`` on ENOSYS; io_uring can open sockets behind the filter's back);
- ``socket`` -> EACCES (``socketpair`` stays allowed: asyncio's self-pipe needs it and it reaches nothing outside);
- signals (``kill``, ``tkill``, ``tgkill``, ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``) to any process but itself
  (or its own group, pid 0), ``pidfd_send_signal``, ``pidfd_getfd``, ``ptrace`` and ``process_vm_readv/writev``
  -> EPERM: code running as root must not kill, trace or read the memory of other processes;
- every syscall of a foreign ABI (x32, 32-bit compat) -> ENOSYS, so numbers cannot be smuggled past the table.

Supported machines: x86_64 and aarch64. :func:`supported` says whether this one is.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JMP_JEQ_K = 0x05 | 0x10 | 0x00
_JMP_JGE_K = 0x05 | 0x30 | 0x00
_JMP_JSET_K = 0x05 | 0x40 | 0x00
_RET_K = 0x06 | 0x00

# seccomp (linux/seccomp.h, linux/prctl.h)
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_THREAD = 0x00010000
_X32_SYSCALL_BIT = 0x40000000

# offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];} (little-endian: low word of args[0])
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16

_ARCHES = {
    # machine: (AUDIT_ARCH_*, syscall numbers)
    "x86_64": (0xC000003E, {"socket": 41, "clone": 56, "fork": 57, "vfork": 58, "clone3": 435,
                            "io_uring_setup": 425, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                            "pidfd_send_signal": 424, "pidfd_getfd": 438, "kill": 62, "tkill": 200, "tgkill": 234,
                            "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}),
    "aarch64": (0xC00000B7, {"socket": 198, "clone": 220, "clone3": 435, "io_uring_setup": 425, "ptrace": 117,
                             "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_send_signal": 424,
                             "pidfd_getfd": 438, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
                             "rt_tgsigqueueinfo": 240}),
}
_SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")


def supported() -> bool:
    """True when this machine's architecture has a syscall table here and the kernel is Linux."""
    return platform.system() == "Linux" and platform.machine() in _ARCHES


def _assemble(program: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Resolve labels: entries are ("label", name) or (code, jt_label, jf_label, k) with labels or None (=next)."""
    positions, index = {}, 0
    for entry in program:
        if entry[0] == "label":
            positions[entry[1]] = index
        else:
            index += 1
    out, index = [], 0
    for entry in program:
        if entry[0] == "label":
            continue
        code, jt, jf, k = entry
        offsets = [0 if target is None else positions[target] - (index + 1) for target in (jt, jf)]
        if not all(0 <= o <= 255 for o in offsets):
            raise ValueError(f"seccomp filter: jump out of range at instruction {index}")
        out.append((code, offsets[0], offsets[1], k))
        index += 1
    return out


def build_filter(machine: str | None = None, own_pid: int | None = None, *, block_network: bool = True,
                 block_processes: bool = True) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for ``machine`` (default: this one). Signals may only go to
    ``own_pid`` (default: the calling process) while ``block_processes``; ptrace and cross-process memory access
    are always denied."""
    machine = machine or platform.machine()
    own_pid = os.getpid() if own_pid is None else own_pid
    if machine not in _ARCHES:
        raise OSError(f"sandbox seccomp filter: unsupported machine {machine!r} (supported: {sorted(_ARCHES)})")
    arch, nr = _ARCHES[machine]
    program: list[tuple] = [
        (_LD_W_ABS, None, None, _OFF_ARCH),
        (_JMP_JEQ_K, None, "enosys", arch),
        (_LD_W_ABS, None, None, _OFF_NR),
        (_JMP_JGE_K, "enosys", None, _X32_SYSCALL_BIT),
        (_JMP_JEQ_K, "enosys", None, nr["io_uring_setup"]),
    ]
    denied = ["ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"]
    if block_network:
        program.append((_JMP_JEQ_K, "eacces", None, nr["socket"]))
    if block_processes:
        program += [(_JMP_JEQ_K, "enosys", None, nr["clone3"]), (_JMP_JEQ_K, "clone", None, nr["clone"])]
        program += [(_JMP_JEQ_K, "signal", None, nr[name]) for name in _SIGNALS]
        denied += ["fork", "vfork", "pidfd_send_signal"]
    program += [(_JMP_JEQ_K, "eperm", None, nr[name]) for name in denied if name in nr]
    program += [
        (_RET_K, None, None, _RET_ALLOW),
        ("label", "signal"),
        (_LD_W_ABS, None, None, _OFF_ARG0_LO),
        (_JMP_JEQ_K, "allow", None, own_pid),
        (_JMP_JEQ_K, "allow", "eperm", 0),
        ("label", "clone"),
        (_LD_W_ABS, None, None, _OFF_ARG0_LO),
        (_JMP_JSET_K, "allow", "eperm", _CLONE_THREAD),
        ("label", "allow"),
        (_RET_K, None, None, _RET_ALLOW),
        ("label", "eperm"),
        (_RET_K, None, None, _RET_ERRNO | errno.EPERM),
        ("label", "eacces"),
        (_RET_K, None, None, _RET_ERRNO | errno.EACCES),
        ("label", "enosys"),
        (_RET_K, None, None, _RET_ERRNO | errno.ENOSYS),
    ]
    return _assemble(program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(*, block_network: bool = True, block_processes: bool = True) -> None:
    """Install the filter on the calling process (irreversible; inherited across exec). Raises OSError on failure."""
    instructions = build_filter(block_network=block_network, block_processes=block_processes)
    blob = b"".join(struct.pack("=HBBI", *ins) for ins in instructions)
    buffer = ctypes.create_string_buffer(blob, len(blob))
    prog = _SockFprog(len(instructions), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sandbox: prctl(PR_SET_NO_NEW_PRIVS) failed: {errno.errorcode.get(err, err)}")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sandbox: prctl(PR_SET_SECCOMP) failed: {errno.errorcode.get(err, err)}")
