"""What one sandboxed run may use, and what came out of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["REQUIRED_LAYERS", "SANDBOX_STATUSES", "SandboxLimits", "SandboxResult"]

SANDBOX_STATUSES = ("ok", "error", "timeout")

# The layers a run refuses to go without (when asked for) unless ``allow_missing_layers`` names them: together they
# give least privilege, a filesystem with nothing to read but the interpreter, and no exec. The other layers
# (landlock_net, landlock_scope, audit_hook) repeat what these already enforce, so a kernel without them is fine.
REQUIRED_LAYERS = ("minimal_root", "netns", "user", "capabilities", "landlock_fs", "seccomp")


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use, and which containment layers it asks for; every field is also a key of a python
    tool's ``config``.

    Attributes:
        wall_timeout_s: wall-clock limit; the whole process group is killed when it passes.
        cpu_time_s: RLIMIT_CPU (seconds of CPU; SIGXCPU ends the run).
        memory_mb: RLIMIT_AS (address space); allocations beyond it raise MemoryError.
        max_file_mb: RLIMIT_FSIZE; writing a bigger file fails with "File too large".
        max_open_files: RLIMIT_NOFILE.
        max_processes: extra threads (and, with ``allow_subprocesses``, processes) the run may start over what its
            user already has (RLIMIT_NPROC).
        max_output_bytes: stdout and stderr are each cut to this many bytes (head and tail kept).
        max_folder_mb: size of the run's own folder inside the minimal root (a tmpfs: writing more fails with "No
            space left on device", and the trainer's disk is never touched).
        network: False (the default) blocks network access in every available layer.
        allow_subprocesses: False (the default) denies fork/exec of new processes in every available layer.
        python_guards: install the in-process audit hook (the layer that gives readable error messages).
        seccomp: install the kernel seccomp filter when the machine supports it.
        network_namespace: run in a fresh network namespace with no interface but loopback (while ``network`` is
            False).
        minimal_root: run in a private mount namespace whose root holds only the interpreter, the shared libraries,
            the allowed packages and the run's own folder (``/sandbox``); everything else is not found.
        unprivileged_user: run as ``nobody`` when the trainer is root (as the trainer's own non-root uid otherwise).
        landlock: Landlock rules: read only the interpreter, its libraries and the allowed packages; write only in
            the run's folder; no execute; no TCP; no signals out.
        drop_capabilities: drop every Linux capability and set ``no_new_privs``.
        allowed_packages: import names (``["numpy", "sympy"]``) of installed packages the program may import; the
            rest of site-packages is hidden. A package's own dependencies must be listed too.
        allow_missing_layers: the opt-in to a weaker sandbox. By default a run refuses to start when one of
            :data:`REQUIRED_LAYERS` is asked for but this machine cannot provide it (no Landlock, no user
            namespaces, ...); ``True`` accepts any missing layer, a list accepts only the layers it names.
    """

    wall_timeout_s: float = 10.0
    cpu_time_s: int = 5
    memory_mb: int = 1024
    max_file_mb: int = 16
    max_open_files: int = 64
    max_processes: int = 16
    max_output_bytes: int = 16384
    max_folder_mb: int = 64
    network: bool = False
    allow_subprocesses: bool = False
    python_guards: bool = True
    seccomp: bool = True
    network_namespace: bool = True
    minimal_root: bool = True
    unprivileged_user: bool = True
    landlock: bool = True
    drop_capabilities: bool = True
    allowed_packages: tuple[str, ...] = ()
    allow_missing_layers: bool | tuple[str, ...] = False

    def __post_init__(self) -> None:
        positive = (
            "wall_timeout_s",
            "cpu_time_s",
            "memory_mb",
            "max_file_mb",
            "max_open_files",
            "max_output_bytes",
            "max_folder_mb",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
        if isinstance(self.max_processes, bool) or not isinstance(self.max_processes, int) or self.max_processes < 0:
            raise ValueError(f"SandboxLimits.max_processes must be an int >= 0, got {self.max_processes!r}")
        packages = self.allowed_packages
        if (
            isinstance(packages, str)
            or not isinstance(packages, list | tuple)
            or not all(isinstance(p, str) and p.isidentifier() for p in packages)
        ):
            raise ValueError(
                f"SandboxLimits.allowed_packages must be a list of top-level import names, got {packages!r}"
            )
        object.__setattr__(self, "allowed_packages", tuple(packages))
        allowed = self.allow_missing_layers
        if not isinstance(allowed, bool):
            if isinstance(allowed, str) or not isinstance(allowed, list | tuple):
                raise ValueError(
                    f"SandboxLimits.allow_missing_layers must be true, false or a list of layer names "
                    f"from {list(REQUIRED_LAYERS)}, got {allowed!r}"
                )
            unknown = [name for name in allowed if name not in REQUIRED_LAYERS]
            if unknown:
                raise ValueError(
                    f"SandboxLimits.allow_missing_layers: unknown layer(s) {unknown}; the layers a run "
                    f"can go without are {list(REQUIRED_LAYERS)}"
                )
            object.__setattr__(self, "allow_missing_layers", tuple(allowed))

    def accepts_missing(self, layer: str) -> bool:
        """True when the config opted into running without ``layer``."""
        allowed = self.allow_missing_layers
        return allowed is True or (not isinstance(allowed, bool) and layer in allowed)

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
    "timeout" (``timeout_kind`` "wall" or "cpu"). ``layers``: the containment layers the run had; ``pid``: the
    sandbox's process id, which is also its process group and session (all gone once the result is returned).
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
    pid: int | None = None

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
