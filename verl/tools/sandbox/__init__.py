"""Run untrusted Python (model-written code) in a child process with resource limits, no network and no
subprocesses; see :mod:`verl.tools.sandbox.runner` for the containment layers and docs/tools.md."""

from verl.tools.sandbox.limits import SANDBOX_STATUSES, SandboxLimits, SandboxResult
from verl.tools.sandbox.runner import available_layers, netns_available, run_python, run_python_sync

__all__ = [
    "SANDBOX_STATUSES",
    "SandboxLimits",
    "SandboxResult",
    "available_layers",
    "netns_available",
    "run_python",
    "run_python_sync",
]
