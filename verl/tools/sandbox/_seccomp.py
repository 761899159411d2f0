"""A seccomp-BPF filter for the sandbox child: no exec, no new processes, no sockets, no kernel attack surface.

Standard library only (ctypes + prctl): the sandbox bootstrap imports this file and installs the filter as
the last step before user code, after the interpreter has started, so "no exec" means exactly that: nothing is
executed after the interpreter, whatever the route (``os.exec*``, ``posix_spawn``, ``ctypes`` calling ``execve``,
shellcode written through ``/proc/self/mem``), because the kernel checks every system call.

Denied (the call fails with an errno, the process lives on and can report it):

- always -> EPERM: ``ptrace``, cross-process memory access, ``mount`` and the new mount API, ``pivot_root``,
  ``chroot``, ``unshare``, ``setns``, ``clone`` with namespace flags, the keyring (``keyctl``, ``add_key``,
  ``request_key``), ``bpf``, ``userfaultfd``, ``io_uring_*``, ``perf_event_open``, ``personality``, module and kexec
  loading, ``open_by_handle_at``, ``setsid``/``setpgid`` (so the run cannot leave the process group the runner
  kills), clock and host name changes, and other calls only an administrator or an exploit needs;
- while processes are blocked (the default): ``execve``/``execveat``, ``fork``/``vfork``, ``clone`` without
  ``CLONE_THREAD`` and signals (``kill``, ``tkill``, ``tgkill``, ``rt_*sigqueueinfo``) to anyone but itself
  (or its own group, pid 0), ``pidfd_send_signal`` -> EPERM;
- while the network is blocked (the default): ``socket`` -> EACCES (``socketpair`` stays allowed: asyncio's
  self-pipe needs it and it reaches nothing outside);
- ``clone3`` -> ENOSYS (its flags live in memory a filter cannot read; glibc falls back to ``clone``, whose flags
  the filter checks), and every syscall of a foreign ABI (x32, 32-bit compat) -> ENOSYS, so numbers cannot be
  smuggled past the table.

Supported machines: x86_64 and aarch64. :func:`supported` says whether this one is.
"""

from __future__ import annotations

import ctypes
import errno
import os
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
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_X32_SYSCALL_BIT = 0x40000000

# offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];} (little-endian: low word of args[0])
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16

# Syscall numbers per machine (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: the generic table).
# tests/tools/sandbox checks them against libseccomp's resolver where that library is installed.
_COMMON_NEW = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_send_signal": 424,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount_setattr": 442,
    "quotactl_fd": 443,
}
_ARCHES = {
    # machine: (AUDIT_ARCH_*, syscall numbers)
    "x86_64": (
        0xC000003E,
        {
            **_COMMON_NEW,
            "socket": 41,
            "clone": 56,
            "fork": 57,
            "vfork": 58,
            "execve": 59,
            "execveat": 322,
            "kill": 62,
            "tkill": 200,
            "tgkill": 234,
            "rt_sigqueueinfo": 129,
            "rt_tgsigqueueinfo": 297,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "unshare": 272,
            "setns": 308,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "bpf": 321,
            "userfaultfd": 323,
            "perf_event_open": 298,
            "personality": 135,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "reboot": 169,
            "swapon": 167,
            "swapoff": 168,
            "acct": 163,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "fanotify_init": 300,
            "syslog": 103,
            "iopl": 172,
            "ioperm": 173,
            "modify_ldt": 154,
            "quotactl": 179,
            "lookup_dcookie": 212,
            "sethostname": 170,
            "setdomainname": 171,
            "settimeofday": 164,
            "clock_settime": 227,
            "clock_adjtime": 305,
            "adjtimex": 159,
            "vhangup": 153,
            "setsid": 112,
            "setpgid": 109,
            "kcmp": 312,
            "uselib": 134,
            "_sysctl": 156,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            **_COMMON_NEW,
            "socket": 198,
            "clone": 220,
            "execve": 221,
            "execveat": 281,
            "kill": 129,
            "tkill": 130,
            "tgkill": 131,
            "rt_sigqueueinfo": 138,
            "rt_tgsigqueueinfo": 240,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "unshare": 97,
            "setns": 268,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "bpf": 280,
            "userfaultfd": 282,
            "perf_event_open": 241,
            "personality": 92,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "reboot": 142,
            "swapon": 224,
            "swapoff": 225,
            "acct": 89,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "fanotify_init": 262,
            "syslog": 116,
            "quotactl": 60,
            "lookup_dcookie": 18,
            "sethostname": 161,
            "setdomainname": 162,
            "settimeofday": 170,
            "clock_settime": 112,
            "clock_adjtime": 266,
            "adjtimex": 171,
            "vhangup": 58,
            "setsid": 157,
            "setpgid": 154,
            "kcmp": 272,
        },
    ),
}
ALWAYS_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "process_madvise",
    "kcmp",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "perf_event_open",
    "personality",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "syslog",
    "iopl",
    "ioperm",
    "modify_ldt",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "sethostname",
    "setdomainname",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "setsid",
    "setpgid",
    "uselib",
    "_sysctl",
)
PROCESS_DENIED = ("fork", "vfork", "execve", "execveat", "pidfd_send_signal")
_SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")


def supported() -> bool:
    """True when this machine's architecture has a syscall table here and the kernel is Linux."""
    return hasattr(os, "uname") and os.uname().sysname == "Linux" and os.uname().machine in _ARCHES


def syscall_numbers(machine: str) -> dict[str, int]:
    """The syscall table this filter uses for ``machine`` (a copy)."""
    return dict(_ARCHES[machine][1])


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


def build_filter(
    machine: str | None = None, own_pid: int | None = None, *, block_network: bool = True, block_processes: bool = True
) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for ``machine`` (default: this one). Signals may only go to
    ``own_pid`` (default: the calling process) while ``block_processes``."""
    machine = machine or os.uname().machine
    own_pid = os.getpid() if own_pid is None else own_pid
    if machine not in _ARCHES:
        raise OSError(f"sandbox seccomp filter: unsupported machine {machine!r} (supported: {sorted(_ARCHES)})")
    arch, nr = _ARCHES[machine]
    denied = [name for name in ALWAYS_DENIED if name in nr]
    program: list[tuple] = [
        (_LD_W_ABS, None, None, _OFF_ARCH),
        (_JMP_JEQ_K, None, "enosys", arch),
        (_LD_W_ABS, None, None, _OFF_NR),
        (_JMP_JGE_K, "enosys", None, _X32_SYSCALL_BIT),
        (_JMP_JEQ_K, "enosys", None, nr["clone3"]),
        (_JMP_JEQ_K, "clone", None, nr["clone"]),
    ]
    if block_network:
        program.append((_JMP_JEQ_K, "eacces", None, nr["socket"]))
    if block_processes:
        program += [(_JMP_JEQ_K, "signal", None, nr[name]) for name in _SIGNALS]
        denied += [name for name in PROCESS_DENIED if name in nr]
    program += [(_JMP_JEQ_K, "eperm", None, nr[name]) for name in denied]
    program += [
        (_RET_K, None, None, _RET_ALLOW),
        ("label", "signal"),
        (_LD_W_ABS, None, None, _OFF_ARG0_LO),
        (_JMP_JEQ_K, "allow", None, own_pid),
        (_JMP_JEQ_K, "allow", "eperm", 0),
        ("label", "clone"),
        (_LD_W_ABS, None, None, _OFF_ARG0_LO),
        (_JMP_JSET_K, "eperm", None, _CLONE_NAMESPACES),
        (_JMP_JSET_K, "allow", "eperm", _CLONE_THREAD) if block_processes else (_RET_K, None, None, _RET_ALLOW),
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
