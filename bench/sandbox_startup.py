"""Start-up cost of one sandboxed Python call (``verl.tools.sandbox``), layer by layer and against the alternatives.

Every call of the python tool starts a fresh interpreter in a fresh sandbox, so what the sandbox adds to an
interpreter start is paid thousands of times an hour. Variants, each running the program ``pass``:

- floor: ``python -I -S -c pass`` (the interpreter alone; what every variant pays) and ``python -I -c pass``
  (with ``site``: the .pth files of site-packages, which the sandbox skips);
- the sandbox with every layer (the default), with only the namespace layers (minimal root, network namespace,
  user switch), with only the kernel rules (Landlock + seccomp, no namespaces: the weaker mode), with rlimits only;
- bubblewrap (``--bwrap PATH`` or ``bwrap`` on PATH) building the same minimal root around ``python -I -S``: the
  well-kept tool for the namespace part, for comparison;
- the previous implementation, loaded from git (``--previous-rev``, default ``e89a922``: the sandbox before the
  minimal root, user switch and exec denial), for the before/after figure; skipped when git cannot show it.

Sandbox calls run in one event loop (as the tool's calls do in the agent loop), variants interleaved round by
round, the first round dropped, medians reported; "added" is the median minus the floor's. The one-off start-up
probe (which layers this machine has) is timed separately.

    python bench/sandbox_startup.py                      # writes bench/results/sandbox_startup.{json,md}
    python bench/sandbox_startup.py --repeats 100 --bwrap /path/to/bwrap
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, markdown_table, median, write_results  # noqa: E402
from verl.tools.sandbox import SandboxLimits, layer_report, layers, run_python  # noqa: E402
from verl.tools.sandbox.plan import SANDBOX_DIR, root_plan  # noqa: E402

NAME = "sandbox_startup"
PREVIOUS_REV = "e89a922"  # the last commit with the previous sandbox (rlimits, Landlock writes, seccomp, netns)
FLOOR = "python -I -S -c pass (floor)"
FULL = "sandbox, every layer (default)"


def _sandbox_variants() -> dict[str, SandboxLimits]:
    weak = dict(allow_missing_layers=True)  # measure whatever this machine has; the layers applied are recorded
    return {
        FULL: SandboxLimits(**weak),
        "sandbox, namespaces only (minimal root, netns, user)": SandboxLimits(
            landlock=False, seccomp=False, python_guards=False, **weak
        ),
        "sandbox, Landlock + seccomp only (no namespaces)": SandboxLimits(
            minimal_root=False, network_namespace=False, unprivileged_user=False, **weak
        ),
        "sandbox, rlimits only": SandboxLimits(
            minimal_root=False,
            network_namespace=False,
            unprivileged_user=False,
            drop_capabilities=False,
            landlock=False,
            seccomp=False,
            python_guards=False,
        ),
    }


def _bwrap_argv(bwrap: str, workdir: str) -> list[str]:
    """bubblewrap building the plan's minimal root (same binds, hidden site-packages, own folder at /sandbox)."""
    plan = root_plan()
    argv = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--setenv",
        "HOME",
        SANDBOX_DIR,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--dev",
        "/dev",
    ]
    if os.geteuid() == 0:
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    for source, destination, _ in plan.binds:
        if not destination.startswith("/dev/"):
            argv += ["--ro-bind", source, destination]
    for path, target in plan.symlinks:
        argv += ["--symlink", target, path]
    for folder in plan.hide:
        argv += ["--tmpfs", folder, "--remount-ro", folder]
    return argv + [
        "--bind",
        workdir,
        SANDBOX_DIR,
        "--chdir",
        SANDBOX_DIR,
        "--",
        sys.executable,
        "-I",
        "-S",
        "-c",
        "pass",
    ]


def _previous_sandbox(rev: str, into: Path):
    """The sandbox package as of git ``rev``, importable under another name (its own imports rewritten)."""
    files = subprocess.run(
        ["git", "ls-tree", "--name-only", rev, "verl/tools/sandbox/"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    package = into / "previous_sandbox"
    package.mkdir()
    for path in files:
        if path.endswith(".py"):
            text = subprocess.run(
                ["git", "show", f"{rev}:{path}"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
            ).stdout
            (package / Path(path).name).write_text(text.replace("verl.tools.sandbox", "previous_sandbox"))
    sys.path.insert(0, str(into))
    return importlib.import_module("previous_sandbox")


def measure(repeats: int, bwrap: str | None, previous_rev: str | None) -> tuple[dict[str, list[float]], dict]:
    loop = asyncio.new_event_loop()
    extra: dict = {"layers": {}}
    fns: dict[str, Callable[[], object]] = {
        FLOOR: lambda: subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True),
        "python -I -c pass (with site)": lambda: subprocess.run([sys.executable, "-I", "-c", "pass"], check=True),
    }
    for name, limits in _sandbox_variants().items():

        def call(limits=limits, name=name):
            result = loop.run_until_complete(run_python("pass", limits))
            assert result.status == "ok", result
            extra["layers"][name] = result.layers

        fns[name] = call
    scratch = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    if bwrap:
        workdir = scratch / "work"
        workdir.mkdir()
        if os.geteuid() == 0:
            os.chown(workdir, 65534, 65534)
        argv = _bwrap_argv(bwrap, str(workdir))
        extra["bwrap_argv"] = argv
        fns["bubblewrap minimal root + python -I -S"] = lambda: subprocess.run(argv, check=True)
    if previous_rev:
        try:
            previous = _previous_sandbox(previous_rev, scratch)
        except (OSError, subprocess.CalledProcessError, ImportError) as err:  # a shallow clone, no git
            extra["previous_unavailable"] = f"git {previous_rev}: {err}"
            print(f"skipped the previous sandbox: {extra['previous_unavailable']}", file=sys.stderr)
        else:
            extra["previous_layers"] = previous.available_layers()

            def call_previous():
                result = loop.run_until_complete(previous.run_python("pass"))
                assert result.status == "ok", result

            fns[f"previous sandbox (git {previous_rev})"] = call_previous
    try:
        seconds: dict[str, list[float]] = {name: [] for name in fns}
        for round_index in range(repeats + 1):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                if round_index:  # the first round warms caches and is dropped
                    seconds[name].append(time.perf_counter() - start)
    finally:
        loop.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return seconds, extra


def time_probe() -> float:
    layers._probe_cache.clear()
    start = time.perf_counter()
    layer_report(SandboxLimits())
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--bwrap", default=shutil.which("bwrap"), help="bubblewrap binary (default: on PATH)")
    parser.add_argument(
        "--previous-rev", default=PREVIOUS_REV, help="git revision of the previous sandbox to compare ('' to skip)"
    )
    args = parser.parse_args(argv)

    probe_s = time_probe()
    seconds, extra = measure(args.repeats, args.bwrap, args.previous_rev)
    floor = median(seconds[FLOOR])
    wall_limit = SandboxLimits().wall_timeout_s
    results, table = [], []
    for name, samples in seconds.items():
        value = median(samples)
        results.append(
            {
                "variant": name,
                "median_ms": value * 1000,
                "min_ms": min(samples) * 1000,
                "added_ms": (value - floor) * 1000,
                "seconds": samples,
            }
        )
        table.append(
            [name, value * 1000, min(samples) * 1000, (value - floor) * 1000, f"{100 * value / wall_limit:.2f}%"]
        )
    title = (
        f"Start-up of one sandboxed call running `pass`, median of {args.repeats} interleaved rounds (first "
        f'dropped); "added" is over the interpreter alone. Default wall limit of a call: {wall_limit:g} s. '
        f"The one-off start-up probe took {probe_s * 1000:.0f} ms. Layers of the default run: "
        f"{', '.join(extra['layers'].get(FULL, []))}."
    )
    markdown = (
        title + "\n\n" + markdown_table(["variant", "median ms", "min ms", "added ms", "of the wall limit"], table)
    )
    print(markdown)
    payload = {"repeats": args.repeats, "probe_s": probe_s, "wall_timeout_s": wall_limit, "results": results, **extra}
    write_results(NAME, payload, markdown, None)
    return payload


if __name__ == "__main__":
    main()
