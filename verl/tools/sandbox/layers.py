"""Which containment layers this machine can give a run, found once by trying them, and the refusal to run
without a required one.

The probe runs the bootstrap once per distinct set of settings, in probe mode: it applies every layer it is asked
for (namespaces, minimal root, user switch, capabilities, Landlock, seccomp) exactly as a run would, records each
outcome instead of stopping, and prints them. A kernel feature missing here (no Landlock, user namespaces
disabled, a container's seccomp policy refusing ``unshare``) therefore shows up at start-up with the reason, not
half-way through training. :func:`check_layers` turns a missing required layer into
:class:`SandboxUnavailableError` unless the config's ``allow_missing_layers`` accepts it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading

from verl.tools.sandbox.limits import REQUIRED_LAYERS, SandboxLimits
from verl.tools.sandbox.rundir import RunDir

__all__ = [
    "ALWAYS_LAYERS",
    "SandboxUnavailableError",
    "available_layers",
    "check_layers",
    "layer_report",
    "missing_layers",
    "wanted_layers",
]

logger = logging.getLogger(__name__)

ALWAYS_LAYERS = ("rlimits", "process_group", "tempdir")
_PROBE_TIMEOUT_S = 60.0
_warned: set[tuple[tuple[str, str], ...]] = set()  # each weaker set-up is announced once per process
_probe_cache: dict[SandboxLimits, tuple[tuple[str, str], ...]] = {}
_probe_lock = threading.Lock()
_WHY = {
    "minimal_root": "the program could read every file the trainer can",
    "netns": "the program shares the trainer's network namespace",
    "user": "the program runs as the trainer's user (root)",
    "capabilities": "the program keeps the trainer's capabilities",
    "landlock_fs": "no kernel rule limits what the program reads and writes",
    "seccomp": "the program can exec binaries and make every system call",
}


class SandboxUnavailableError(RuntimeError):
    """This machine cannot give the sandbox a layer the config requires (and did not opt out of)."""


def wanted_layers(limits: SandboxLimits) -> list[str]:
    """The layers ``limits`` asks for, in the order they are applied (the always-on ones excluded)."""
    wanted = []
    if limits.minimal_root:
        wanted.append("minimal_root")
    if limits.network_namespace and not limits.network:
        wanted.append("netns")
    if limits.unprivileged_user:
        wanted.append("user")
    if limits.drop_capabilities:
        wanted.append("capabilities")
    if limits.landlock:
        wanted += ["landlock_fs"] + ([] if limits.network else ["landlock_net"]) + ["landlock_scope"]
    if limits.seccomp:
        wanted.append("seccomp")
    if limits.python_guards and not (limits.network and limits.allow_subprocesses):
        wanted.append("audit_hook")
    return wanted


def _probe(limits: SandboxLimits) -> tuple[tuple[str, str], ...]:
    """Each wanted layer -> its outcome. A probe that ran to the end is cached for the process; one that could
    not run or died (killed, timed out) is not, so the next call tries again."""
    with _probe_lock:
        if limits in _probe_cache:
            return _probe_cache[limits]
    wanted = wanted_layers(limits)
    try:
        with RunDir(limits, wanted, probe=True) as run:
            done = subprocess.run(
                run.argv,
                cwd=run.workdir,
                env=run.env,
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_S,
                start_new_session=True,
            )
    except (OSError, subprocess.SubprocessError) as err:
        return tuple((name, f"the probe could not run: {err}") for name in wanted)
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return tuple((name, f"the probe failed: {why}") for name in wanted)
    outcome = tuple((name, str(report.get(name, "not tried"))) for name in wanted)
    with _probe_lock:
        _probe_cache[limits] = outcome
    return outcome


def _probe_key(limits: SandboxLimits) -> SandboxLimits:
    """The limits with every field that cannot change a layer's outcome reset, so the probe is cached widely."""
    return SandboxLimits(
        network=limits.network,
        allow_subprocesses=limits.allow_subprocesses,
        python_guards=limits.python_guards,
        seccomp=limits.seccomp,
        network_namespace=limits.network_namespace,
        minimal_root=limits.minimal_root,
        unprivileged_user=limits.unprivileged_user,
        landlock=limits.landlock,
        drop_capabilities=limits.drop_capabilities,
        allowed_packages=limits.allowed_packages,
    )


def layer_report(limits: SandboxLimits | None = None) -> dict[str, str]:
    """Each layer ``limits`` asks for -> ``"ok"`` or why this machine cannot provide it (probed once, cached)."""
    return dict(_probe(_probe_key(limits or SandboxLimits())))


def available_layers(limits: SandboxLimits | None = None) -> list[str]:
    """The containment layers a run with ``limits`` gets on this machine."""
    return list(ALWAYS_LAYERS) + [name for name, outcome in layer_report(limits).items() if outcome == "ok"]


def missing_layers(limits: SandboxLimits | None = None) -> dict[str, str]:
    """The required layers ``limits`` asks for that this machine cannot provide -> the reason."""
    return {
        name: outcome for name, outcome in layer_report(limits).items() if outcome != "ok" and name in REQUIRED_LAYERS
    }


def check_layers(limits: SandboxLimits | None = None, where: str = "python sandbox") -> list[str]:
    """The layers a run gets; raises :class:`SandboxUnavailableError` naming each missing required layer, unless
    ``limits.allow_missing_layers`` accepts them all (then a warning names them)."""
    limits = limits or SandboxLimits()
    missing = missing_layers(limits)
    refused = [name for name in missing if not limits.accepts_missing(name)]
    if refused:
        lines = "\n".join(f"  - {name}: {missing[name]} (without it {_WHY[name]})" for name in refused)
        raise SandboxUnavailableError(
            f"{where}: this machine cannot provide the sandbox layer(s) {refused}:\n{lines}\n"
            f"Refusing to run model-written code. To run it anyway with the weaker sandbox, set "
            f"allow_missing_layers: {refused} (or true) in the tool's config; see docs/sandbox.md."
        )
    if missing and tuple(sorted(missing.items())) not in _warned:
        _warned.add(tuple(sorted(missing.items())))
        logger.warning(
            "%s: running WITHOUT the sandbox layer(s) %s (allowed by allow_missing_layers): %s",
            where,
            sorted(missing),
            "; ".join(f"{k}: {v}" for k, v in missing.items()),
        )
    return available_layers(limits)
