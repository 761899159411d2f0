"""Run upstream verl's own CPU unit tests against this package.

verl publishes its tests inside its PyPI wheel. This script downloads that wheel (``pip download verl==<version>
--no-deps``), unpacks only its ``tests/`` folder into a scratch directory, and runs every ``tests/**/*_on_cpu.py``
with pytest there, so ``import verl`` resolves to the installed package of this repository (the wheel's own
``verl/`` is never unpacked, and the script checks where ``verl`` comes from before it starts).

Tests that cannot pass here are listed, one per line with the reason, in ``verl_cpu_suite_skips.txt`` beside this
file (``<node id>  # <reason>``; a bare file path leaves out the whole file). They are deselected, not hidden: the
summary counts them. The exit status is pytest's: any failure outside that list fails the run.

    python tests/compat/run_verl_cpu_suite.py                 # download, unpack, run, summarise
    python tests/compat/run_verl_cpu_suite.py --json out.json # also write the counts and the failing node ids
    python tests/compat/run_verl_cpu_suite.py -- -x -k protocol   # extra pytest arguments after --
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
SKIP_FILE = HERE / "verl_cpu_suite_skips.txt"
DEFAULT_VERSION = "0.9.1"
DEFAULT_CACHE = Path(os.environ.get("VERL_COMPAT_CACHE", Path(tempfile.gettempdir()) / "verl-compat-cache"))


def download_wheel(version: str, cache: Path) -> Path:
    """The cached ``verl-<version>`` wheel, downloaded once from the package index."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"verl-{version}-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"verl=={version}",
                "--no-deps",
                "--quiet",
                "--disable-pip-version-check",
                "-d",
                str(cache),
            ],
            check=True,
        )
        found = sorted(cache.glob(f"verl-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download verl=={version} left no wheel in {cache}")
    return found[-1]


def unpack_tests(wheel: Path, target: Path) -> Path:
    """Extract only ``tests/`` of ``wheel`` into ``target``; returns the tests folder."""
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.startswith("tests/")]
        if not members:
            raise ValueError(f"{wheel.name} has no tests/ folder")
        archive.extractall(target, members=members)
    return target / "tests"


def read_skips(path: Path = SKIP_FILE) -> dict[str, str]:
    """``{node id or file path: reason}`` from the skip list; every entry must give a reason."""
    skips: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        node, _, reason = line.partition("#")
        if not reason.strip():
            raise ValueError(f"{path}:{number}: {node.strip()!r} has no reason (write '<node id>  # <reason>')")
        skips[node.strip()] = reason.strip()
    return skips


def check_our_package(workdir: Path) -> str:
    """Where ``import verl`` resolves from ``workdir``; refuses a verl that is not this repository's."""
    probe = "import verl, os; print(os.path.realpath(verl.__file__))"
    location = subprocess.run(
        [sys.executable, "-c", probe], cwd=workdir, check=True, capture_output=True, text=True
    ).stdout.strip()
    if not location.startswith(str(REPO_ROOT)):
        raise RuntimeError(
            f"`import verl` resolves to {location}, not to this repository ({REPO_ROOT}): install it "
            "with `pip install -e .` and make sure no other verl is on the path"
        )
    return location


def summarise(junit_xml: Path) -> dict[str, object]:
    """Counts and failing tests (dotted ``module[.Class]::test``) from pytest's JUnit report."""
    root = ElementTree.parse(junit_xml).getroot()
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failing: list[str] = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        # dotted ``module[.Class]::test``; a file that fails to import has no class and the module as its name
        node = f"{classname}::{name}" if classname else name
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            failing.append(node)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**counts, "failing": failing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default=DEFAULT_VERSION, help="verl release whose tests to run")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the downloaded wheel is kept")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    wheel = download_wheel(args.version, args.cache)
    skips = read_skips()
    with tempfile.TemporaryDirectory(prefix="verl-cpu-suite-") as scratch:
        workdir = Path(scratch)
        tests = unpack_tests(wheel, workdir)
        location = check_our_package(workdir)
        files = sorted(str(p.relative_to(workdir)) for p in tests.rglob("*_on_cpu.py"))
        selected = [f for f in files if f not in skips]
        deselect = [arg for node in skips if "::" in node for arg in ("--deselect", node)]
        junit = workdir / "report.xml"
        print(
            f"verl {args.version} CPU suite: {len(files)} files ({len(files) - len(selected)} left out whole) "
            f"against {location}",
            flush=True,
        )
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--continue-on-collection-errors",
            f"--junitxml={junit}",
            *deselect,
            *args.pytest_args,
            *selected,
        ]
        status = subprocess.run(command, cwd=workdir).returncode
        summary = summarise(junit) if junit.exists() else {"passed": 0, "failed": 0, "skipped": 0, "failing": []}
    left_out = {node: reason for node, reason in skips.items()}
    summary.update({"version": args.version, "left_out": left_out, "exit_status": status})
    print(
        f"verl {args.version} CPU suite against this package: {summary['passed']} passed, {summary['failed']} "
        f"failed, {summary['skipped']} skipped, {len(left_out)} entries left out "
        f"(see {SKIP_FILE.relative_to(REPO_ROOT)})",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
