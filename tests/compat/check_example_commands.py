"""Measure how many of verl's example command lines ``verl.trainer.main_ppo`` accepts.

Each line of ``example_commands.txt`` holds the Hydra arguments of one upstream example or e2e script that runs
``python -m verl.trainer.main_ppo`` (shell variables replaced by plausible values). Every line is fed to
``<python> -m verl.trainer.main_ppo --cfg job <arguments>``, which composes and checks the config without training.
The report gives the accepted share, the keys refused (with how often), and the refusals that name a backend this
build does not include (Megatron, NPU, ...), which count as expected.

    python tests/compat/check_example_commands.py                      # this package
    python tests/compat/check_example_commands.py --python /tmp/realvenv/bin/python   # real verl, same lines
    python tests/compat/check_example_commands.py --reference /tmp/realvenv/bin/python  # both, and the gap

With ``--reference`` the script exits 1 when a line the reference accepts is refused here for a reason other than a
missing backend (the compatibility target). ``--json FILE`` writes the per-line results.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

COMMANDS = Path(__file__).with_name("example_commands.txt")
# A refusal that names one of these is expected: the backend is not part of this build.
BACKEND_WORDS = ("Megatron", "megatron", "NPU", "Ascend", "TorchTitan", "VeOmni")
_KEY_PATTERNS = (
    re.compile(r"Could not override '([^']+)'"),
    re.compile(r"Key '([^']+)' is not in struct"),
    re.compile(r"Could not append to config\. An item is already at '([^']+)'"),
    re.compile(r"config error: ([\w.\-]+):"),
    re.compile(r"Cannot find primary config '([^']+)'"),
)


@dataclass
class Result:
    line: int
    accepted: bool
    refused_key: str | None
    backend: bool
    message: str
    seconds: float


def read_commands(path: Path) -> list[list[str]]:
    """One argument list per non-empty line (shell quoting as in the scripts)."""
    return [shlex.split(line) for line in path.read_text().splitlines() if line.strip()]


def _refusal(stderr: str) -> tuple[str | None, str]:
    """The refused key (if one is named) and the line of stderr that says why."""
    for pattern in _KEY_PATTERNS:
        match = pattern.search(stderr)
        if match:
            line = next((ln for ln in stderr.splitlines() if match.group(0) in ln), match.group(0))
            return match.group(1), line.strip()
    tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return None, tail[-1].strip() if tail else "(no message)"


def run_one(python: str, number: int, args: list[str], timeout: float) -> Result:
    """Run ``python -m verl.trainer.main_ppo --cfg job <args>`` in an empty folder."""
    start = time.monotonic()
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory(prefix="verl_example_") as cwd:
        try:
            proc = subprocess.run(
                [python, "-m", "verl.trainer.main_ppo", "--cfg", "job", *args],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return Result(number, False, None, False, f"timed out after {timeout:.0f}s", time.monotonic() - start)
    seconds = time.monotonic() - start
    if proc.returncode == 0:
        return Result(number, True, None, False, "", seconds)
    key, message = _refusal(proc.stderr)
    return Result(number, False, key, any(word in message for word in BACKEND_WORDS), message, seconds)


def run_all(python: str, commands: list[list[str]], jobs: int, timeout: float) -> list[Result]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_one, python, i + 1, args, timeout) for i, args in enumerate(commands)]
        results = [f.result() for f in futures]
    return sorted(results, key=lambda r: r.line)


def summarize(name: str, results: list[Result]) -> str:
    total = len(results)
    accepted = sum(r.accepted for r in results)
    backend = [r for r in results if not r.accepted and r.backend]
    lines = [
        f"## {name}",
        "",
        f"accepted: {accepted}/{total} ({100.0 * accepted / max(total, 1):.0f}%); refused naming a backend this "
        f"build lacks: {len(backend)}; other refusals: {total - accepted - len(backend)}",
        "",
    ]
    keys = collections.Counter(r.refused_key or "(no key named)" for r in results if not r.accepted and not r.backend)
    if keys:
        lines += ["| refused key | lines |", "|---|---|"]
        lines += [f"| `{key}` | {count} |" for key, count in keys.most_common()]
        lines.append("")
    for r in results:
        if not r.accepted:
            kind = "backend" if r.backend else "refused"
            lines.append(f"- line {r.line} ({kind}): {r.message[:200]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter whose verl is measured")
    parser.add_argument("--reference", help="a second interpreter (e.g. with real verl) measured on the same lines")
    parser.add_argument("--commands", type=Path, default=COMMANDS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per command")
    parser.add_argument("--json", type=Path, help="write the per-line results here")
    args = parser.parse_args(argv)

    commands = read_commands(args.commands)
    ours = run_all(args.python, commands, args.jobs, args.timeout)
    report = {"python": [asdict(r) for r in ours]}
    print(summarize(f"{args.python}: {len(commands)} commands", ours))
    status = 0
    if args.reference:
        theirs = run_all(args.reference, commands, args.jobs, args.timeout)
        report["reference"] = [asdict(r) for r in theirs]
        print()
        print(summarize(f"{args.reference} (reference)", theirs))
        gap = [o for o, t in zip(ours, theirs, strict=True) if t.accepted and not o.accepted and not o.backend]
        print()
        print(f"## accepted by the reference, refused here (not a missing backend): {len(gap)}")
        for r in gap:
            print(f"- line {r.line}: {r.message[:200]}")
        status = 1 if gap else 0
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
