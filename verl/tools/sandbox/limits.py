"""What one sandboxed run may use, and what came out of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SANDBOX_STATUSES", "SandboxLimits", "SandboxResult"]

SANDBOX_STATUSES = ("ok", "error", "timeout")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run; every field is also a key of a python tool's ``config``.

    Attributes:
        wall_timeout_s: wall-clock limit; the whole process group is killed when it passes.
        cpu_time_s: RLIMIT_CPU (seconds of CPU; SIGXCPU ends the run).
        memory_mb: RLIMIT_AS (address space); allocations beyond it raise MemoryError.
        max_file_mb: RLIMIT_FSIZE; writing a bigger file fails with "File too large".
        max_open_files: RLIMIT_NOFILE.
        max_processes: extra processes/threads the run may start over what its user already has (RLIMIT_NPROC);
            the kernel ignores this limit for root, which is why the seccomp layer denies process creation.
        max_output_bytes: stdout and stderr are each cut to this many bytes (head and tail kept).
        network: False (the default) blocks network access in every available layer.
        allow_subprocesses: False (the default) denies fork/exec of new processes in every available layer.
        python_guards: install the in-process audit hook (the layer that gives readable error messages).
        seccomp: install the kernel seccomp filter when the machine supports it.
        network_namespace: run in a fresh network namespace (``unshare -n``) when the process may do so.
        landlock: restrict writes to the run's directory, TCP and signals with Landlock when the kernel has it.
        drop_capabilities: drop every Linux capability (matters when the sandbox runs as root).
    """

    wall_timeout_s: float = 10.0
    cpu_time_s: int = 5
    memory_mb: int = 1024
    max_file_mb: int = 16
    max_open_files: int = 64
    max_processes: int = 16
    max_output_bytes: int = 16384
    network: bool = False
    allow_subprocesses: bool = False
    python_guards: bool = True
    seccomp: bool = True
    network_namespace: bool = True
    landlock: bool = True
    drop_capabilities: bool = True

    def __post_init__(self) -> None:
        positive = ("wall_timeout_s", "cpu_time_s", "memory_mb", "max_file_mb", "max_open_files", "max_output_bytes")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
        if isinstance(self.max_processes, bool) or not isinstance(self.max_processes, int) or self.max_processes < 0:
            raise ValueError(f"SandboxLimits.max_processes must be an int >= 0, got {self.max_processes!r}")

    @classmethod
    def from_config(cls, config: dict[str, Any] | None, where: str = "sandbox config") -> SandboxLimits:
        """Pick the known keys of ``config`` (a tool's ``config`` mapping); other keys are left to the caller."""
        config = dict(config or {})
        known = {name for name in cls.__dataclass_fields__}
        values = {key: config[key] for key in known if key in config}
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from err


@dataclass
class SandboxResult:
    """The outcome of one run.

    ``status``: "ok" (exit code 0), "error" (non-zero exit or an uncaught exception, named in ``error_type``), or
    "timeout" (``timeout_kind`` "wall" or "cpu").
    """

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    error_type: str | None = None
    error_message: str | None = None
    timeout_kind: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    layers: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        """What a model reads: output first, then a one-line verdict when the run did not succeed."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.status == "timeout":
            what = "CPU time" if self.timeout_kind == "cpu" else "wall-clock time"
            parts.append(f"Error: timeout ({what} limit exceeded)")
        elif self.status == "error":
            if self.stderr:
                parts.append(self.stderr.rstrip("\n"))
            if self.error_type is None:
                parts.append(f"Error: process exited with code {self.exit_code}")
        return "\n".join(parts) if parts else "(no output)"
