"""Run untrusted Python (model-written code) in a locked-down child process: an unprivileged user, a minimal root
with nothing to read but the interpreter, no exec, no network, resource limits. See
:mod:`verl.tools.sandbox.runner` for the layers and docs/sandbox.md for the design."""

from verl.tools.sandbox.layers import (
    SandboxUnavailableError,
    available_layers,
    check_layers,
    layer_report,
    missing_layers,
)
from verl.tools.sandbox.limits import REQUIRED_LAYERS, SANDBOX_STATUSES, SandboxLimits, SandboxResult
from verl.tools.sandbox.runner import run_python, run_python_sync

__all__ = [
    "REQUIRED_LAYERS",
    "SANDBOX_STATUSES",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "available_layers",
    "check_layers",
    "layer_report",
    "missing_layers",
    "run_python",
    "run_python_sync",
]
