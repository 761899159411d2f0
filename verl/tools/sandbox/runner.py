"""Parent side of the sandbox: run untrusted Python in a locked-down child process and report what happened.

Containment layers (each run records the ones it had in ``SandboxResult.layers``; docs/sandbox.md has the design
and what each one blocks):

- always: ``rlimits`` (CPU, address space, file size, open files, core=0, processes), ``process_group`` (the child
  leads its own session; on the wall timeout and after every run the whole group is killed), ``tempdir`` (a fresh
  folder, removed afterwards) and an environment of HOME, TMPDIR and LANG only;
- ``minimal_root``: private mount namespace whose root holds only the interpreter, shared libraries, allowed
  packages and the run's folder; ``netns``: a network namespace with only a loopback that is down;
- ``user``: the program runs as ``nobody`` when the trainer is root; ``capabilities``: none, and no_new_privs;
- ``landlock_fs`` / ``landlock_net`` / ``landlock_scope``: kernel rules on reads, writes, exec, TCP and signals;
- ``seccomp``: no exec, no new processes, no sockets, no ptrace/mount/unshare/bpf/io_uring/...;
- ``audit_hook``: the same rules inside Python, with readable messages.

Which layers this machine can provide is probed once (:mod:`verl.tools.sandbox.layers`); a run refuses to start
(:class:`SandboxUnavailableError`) when a required one is missing, unless the config's ``allow_missing_layers``
opts into the weaker sandbox.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

from verl.tools.sandbox.layers import check_layers
from verl.tools.sandbox.limits import SandboxLimits, SandboxResult
from verl.tools.sandbox.rundir import RunDir

__all__ = ["run_python", "run_python_sync"]

_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_KILL_GRACE_S = 2.0
_CHUNK = 65536


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
    """The exception type and message from a Python traceback's last line; (None, None) without a traceback.
    A syntax error has no "Traceback" header, only the ``File "main.py"`` line with the caret."""
    if "Traceback (most recent call last)" not in stderr and not stderr.lstrip().startswith('File "main.py"'):
        return None, None
    for line in reversed(stderr.rstrip().splitlines()):
        if not line.strip():
            continue
        match = None if line[:1].isspace() else _ERROR_LINE.match(line)
        if match is None:
            return None, None
        return match.group(1).rsplit(".", 1)[-1], (match.group(2) or None)
    return None, None


async def run_python(code: str, limits: SandboxLimits | None = None, *, stdin: str | None = None) -> SandboxResult:
    """Run ``code`` as a Python program under ``limits``; never raises for anything the code does.

    ``stdin``, when given, is fed to the program's standard input (else it reads EOF). Raises
    :class:`~verl.tools.sandbox.layers.SandboxUnavailableError` when this machine lacks a required layer.
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}")
    limits = limits or SandboxLimits()
    layers = check_layers(limits)  # probed once per distinct limits, then cached
    with RunDir(limits, layers, code) as run:
        return await _supervise(run, limits, layers, stdin)


async def _supervise(run: RunDir, limits: SandboxLimits, layers: list[str], stdin: str | None) -> SandboxResult:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *run.argv,
        cwd=run.workdir,
        env=run.env,
        start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
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
    result = SandboxResult(
        status="ok",
        exit_code=code,
        stdout=out.text(),
        stderr=err.text(),
        duration_s=duration,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        layers=layers,
        pid=proc.pid,
    )
    if timed_out:
        result.status, result.timeout_kind = "timeout", "wall"
    elif (
        code is not None
        and code < 0
        and (-code == signal.SIGXCPU or (-code == signal.SIGKILL and duration >= limits.cpu_time_s))
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
