"""Parent side of the sandbox: run untrusted Python in a locked-down child process and report what happened.

Containment layers (each run records the ones that applied in ``SandboxResult.layers``):

1. ``rlimits`` (always): RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE=0 and RLIMIT_NPROC, set
   by the child before any user code runs. The kernel does not apply RLIMIT_NPROC to root.
2. ``process_group`` (always): the child starts its own session; on the wall timeout, and after every run, the
   whole process group is killed with SIGKILL, so nothing it started outlives it.
3. ``tempdir`` (always): a fresh private working directory (HOME too), removed afterwards; a minimal environment.
4. ``capabilities`` (``limits.drop_capabilities``): every Linux capability dropped, bounding set included, so a
   child running as root keeps uid 0 (it must read the interpreter) but cannot mount, load modules, use raw
   sockets or bypass file permissions.
5. ``landlock_fs`` / ``landlock_net`` / ``landlock_scope`` (kernel Landlock ABI 1 / 4 / 6, ``limits.landlock``):
   files may be created, written or removed only inside the run's directory (and /dev/null); TCP bind/connect
   denied; no signals to processes outside the sandbox.
6. ``seccomp`` (Linux x86_64/aarch64, ``limits.seccomp``): a kernel filter denying socket(), fork/vfork/non-thread
   clone (unless ``allow_subprocesses``), signals to other processes, ptrace and cross-process memory access;
   holds against ctypes and exec, and for root.
7. ``netns`` (root with a working ``unshare -n``, ``limits.network_namespace``): a fresh network namespace with
   no interfaces but loopback, down.
8. ``audit_hook`` (``limits.python_guards``): a ``sys.addaudithook`` hook raising PermissionError with a readable
   message on socket creation, DNS, fork/exec/subprocess.

Reading files stays allowed everywhere (the interpreter needs its standard library). The network layers apply
while ``network`` is False, the process layers while ``allow_subprocesses`` is False (the defaults).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from verl.tools.sandbox import _landlock, _seccomp
from verl.tools.sandbox.limits import SandboxLimits, SandboxResult

__all__ = ["available_layers", "netns_available", "run_python", "run_python_sync"]

_BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap.py")
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_KILL_GRACE_S = 2.0
_CHUNK = 65536


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: unavailable)."""
    try:
        return _landlock.abi_version()
    except (OSError, AttributeError):
        return 0


@functools.lru_cache(maxsize=1)
def netns_available() -> bool:
    """True when this process may put a child in a fresh network namespace (root, and ``unshare -n`` works)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    tool = shutil.which("unshare")
    if tool is None:
        return False
    try:
        done = subprocess.run([tool, "-n", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def available_layers(limits: SandboxLimits | None = None) -> list[str]:
    """The containment layers a run with ``limits`` gets on this machine (see the module docstring)."""
    limits = limits or SandboxLimits()
    layers = ["rlimits", "process_group", "tempdir"]
    locked = not limits.network or not limits.allow_subprocesses
    if limits.drop_capabilities:
        layers.append("capabilities")
    abi = landlock_abi() if limits.landlock else 0
    if abi >= 1:
        layers.append("landlock_fs")
        if abi >= 4 and not limits.network:
            layers.append("landlock_net")
        if abi >= 6:
            layers.append("landlock_scope")
    if limits.seccomp and _seccomp.supported():
        layers.append("seccomp")
    if limits.network_namespace and not limits.network and netns_available():
        layers.append("netns")
    if limits.python_guards and locked:
        layers.append("audit_hook")
    return layers


class _Capture:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest, so memory stays bounded
    however much the child prints (stderr's tail holds the exception, stdout's head the answer)."""

    def __init__(self, limit: int):
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n...[{omitted} bytes of output truncated]...\n{tail}"


async def _pump(stream: asyncio.StreamReader, capture: _Capture) -> None:
    while True:
        data = await stream.read(_CHUNK)
        if not data:
            return
        capture.add(data)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _parse_error(stderr: str) -> tuple[str | None, str | None]:
    """The exception type and message from a Python traceback's last line; (None, None) without a traceback."""
    if "Traceback (most recent call last)" not in stderr:
        return None, None
    for line in reversed(stderr.rstrip().splitlines()):
        if not line.strip():
            continue
        match = None if line[:1].isspace() else _ERROR_LINE.match(line)
        if match is None:
            return None, None
        return match.group(1).rsplit(".", 1)[-1], (match.group(2) or None)
    return None, None


def _child_env(workdir: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}


async def run_python(code: str, limits: SandboxLimits | None = None, *, stdin: str | None = None) -> SandboxResult:
    """Run ``code`` as a Python program under ``limits``; never raises for anything the code does.

    ``stdin``, when given, is fed to the program's standard input (else it reads EOF).
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}")
    limits = limits or SandboxLimits()
    layers = available_layers(limits)
    workdir = tempfile.mkdtemp(prefix="verl-sandbox-")
    try:
        code_file = os.path.join(workdir, "main.py")
        with open(code_file, "w", encoding="utf-8") as f:
            f.write(code)
        settings = {
            "code_file": code_file,
            "cpu_time_s": int(max(1, round(limits.cpu_time_s))),
            "memory_mb": int(limits.memory_mb),
            "max_file_mb": int(limits.max_file_mb),
            "max_open_files": int(limits.max_open_files),
            "max_processes": int(limits.max_processes),
            "network": bool(limits.network),
            "allow_subprocesses": bool(limits.allow_subprocesses),
            "workdir": workdir,
            "drop_capabilities": "capabilities" in layers,
            "landlock": "landlock_fs" in layers,
            "seccomp": "seccomp" in layers,
            "python_guards": "audit_hook" in layers,
        }
        argv = [sys.executable, "-I", "-u", _BOOTSTRAP, json.dumps(settings)]
        if "netns" in layers:
            argv = [shutil.which("unshare") or "unshare", "-n", "--", *argv]
        return await _supervise(argv, workdir, limits, layers, stdin)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _supervise(argv: list[str], workdir: str, limits: SandboxLimits, layers: list[str],
                     stdin: str | None) -> SandboxResult:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=workdir, env=_child_env(workdir), start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = _Capture(limits.max_output_bytes), _Capture(limits.max_output_bytes)
    pumps = [asyncio.ensure_future(_pump(proc.stdout, out)), asyncio.ensure_future(_pump(proc.stderr, err))]
    timed_out = False
    try:
        if stdin is not None:
            try:
                proc.stdin.write(stdin.encode("utf-8"))
                await asyncio.wait_for(proc.stdin.drain(), timeout=limits.wall_timeout_s)
            except (BrokenPipeError, ConnectionResetError, asyncio.TimeoutError):
                pass
            finally:
                proc.stdin.close()
        remaining = max(0.0, limits.wall_timeout_s - (time.perf_counter() - start))
        try:
            await asyncio.wait_for(proc.wait(), timeout=remaining)
        except asyncio.TimeoutError:
            timed_out = True
    finally:
        _kill_group(proc.pid)  # the run is over either way: nothing it started may outlive it
        if proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), timeout=_KILL_GRACE_S)
            except asyncio.TimeoutError:
                pass
        _, pending = await asyncio.wait(pumps, timeout=_KILL_GRACE_S)
        for task in pending:
            task.cancel()
    duration = time.perf_counter() - start
    code = proc.returncode
    result = SandboxResult(status="ok", exit_code=code, stdout=out.text(), stderr=err.text(), duration_s=duration,
                           stdout_truncated=out.truncated, stderr_truncated=err.truncated, layers=layers)
    if timed_out:
        result.status, result.timeout_kind = "timeout", "wall"
    elif code is not None and code < 0 and (
        -code == signal.SIGXCPU or (-code == signal.SIGKILL and duration >= limits.cpu_time_s)
    ):
        # SIGXCPU at the soft CPU limit; SIGKILL at the hard one when the code ignored SIGXCPU (CPU time never
        # exceeds wall time, so a SIGKILL sooner than the CPU limit came from elsewhere)
        result.status, result.timeout_kind = "timeout", "cpu"
    elif code is not None and code < 0:
        result.status, result.error_type = "error", "Signal"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        result.error_message = f"killed by signal {name}"
    elif code != 0:
        result.status = "error"
        result.error_type, result.error_message = _parse_error(result.stderr)
        if code == 3 and result.stderr.startswith("SandboxSetupError"):
            result.error_type = "SandboxSetupError"
    return result


def run_python_sync(code: str, limits: SandboxLimits | None = None, *, stdin: str | None = None) -> SandboxResult:
    """Blocking :func:`run_python` for callers without an event loop."""
    return asyncio.run(run_python(code, limits, stdin=stdin))
