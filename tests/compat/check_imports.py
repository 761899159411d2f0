"""Measure how much of a sample of ``verl`` import statements resolves against the installed ``verl``.

The sample (``recipe_imports.txt`` beside this file) holds import lines that public recipes and forks
write against verl. Run the checker with any interpreter: it reports on whichever ``verl`` that
interpreter imports, so the same sample scores our package and upstream alike::

    python tests/compat/check_imports.py                                   # ours
    /tmp/realvenv/bin/python tests/compat/check_imports.py --json real.json  # upstream
    python tests/compat/check_imports.py --reference real.json             # what ours still lacks

Imports run in worker subprocesses (one per ``verl.<subpackage>`` group, started in a scratch
directory, with their stdout diverted) so a module that prints, exits, hangs or crashes at import time
costs only its own targets, never the measurement. Each target runs as its own ``exec`` in a fresh
namespace, exactly as the recipe wrote it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import importlib.util
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_SAMPLE = Path(__file__).with_name("recipe_imports.txt")

OK = "ok"
MODULE_MISSING = "module_missing"  # the verl module itself does not exist
NAME_MISSING = "name_missing"  # the module imports but lacks the name
DEPENDENCY_MISSING = "dependency_missing"  # the module exists but needs a package that is not installed
ERROR = "error"  # the module raised something else at import time
CRASH = "crash"  # the worker process died while importing it
TIMEOUT = "timeout"  # the import did not finish within the time limit


@dataclass(frozen=True)
class Target:
    """One imported name: ``from module import name``, or ``import module`` when ``name`` is None."""

    module: str
    name: str | None = None

    @property
    def statement(self) -> str:
        return f"import {self.module}" if self.name is None else f"from {self.module} import {self.name}"

    @property
    def group(self) -> str:
        """Worker group: the first two dotted components (``verl.workers``), so siblings share a process."""
        return ".".join(self.module.split(".")[:2])


@dataclass
class Outcome:
    """How one target fared: a status from the constants above and, when it failed, why."""

    status: str
    detail: str = ""


@dataclass
class LineResult:
    """One sample line and the failed targets that keep it from resolving."""

    line: str
    resolves: bool
    failures: list[dict[str, str | None]] = field(default_factory=list)


def parse_line(line: str) -> list[Target]:
    """The targets of one absolute import statement; raise ValueError naming the line otherwise."""
    try:
        tree = ast.parse(line)
    except SyntaxError as exc:
        raise ValueError(f"not a Python statement: {line!r}") from exc
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Import | ast.ImportFrom):
        raise ValueError(f"not a single import statement: {line!r}")
    node = tree.body[0]
    if isinstance(node, ast.Import):
        return [Target(alias.name) for alias in node.names]
    if node.level or not node.module:
        raise ValueError(f"relative imports cannot be checked: {line!r}")
    return [Target(node.module, alias.name) for alias in node.names]


def read_sample(path: Path) -> list[str]:
    """Non-blank, non-comment lines of a sample file, in file order."""
    lines = [raw.strip() for raw in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


# ---------------------------------------------------------------- worker side


def _classify_module_error(module: str, exc: BaseException) -> Outcome:
    if isinstance(exc, ModuleNotFoundError):
        missing = exc.name or ""
        if missing and (missing == module or module.startswith(missing + ".")):
            return Outcome(MODULE_MISSING, missing)
        if missing:
            return Outcome(DEPENDENCY_MISSING, missing.split(".")[0])
    return Outcome(ERROR, f"{type(exc).__name__}: {exc}"[:300])


def check_target(target: Target) -> Outcome:
    """Import the target's module, then exec the statement itself in a fresh namespace."""
    try:
        importlib.import_module(target.module)
    except BaseException as exc:  # noqa: BLE001 - import-time SystemExit and friends are findings, not our exit
        return _classify_module_error(target.module, exc)
    try:
        exec(target.statement, {})  # noqa: S102 - the statement is the measurement
    except ModuleNotFoundError as exc:
        outcome = _classify_module_error(f"{target.module}.{target.name}", exc)
        return Outcome(NAME_MISSING, str(target.name)) if outcome.status == MODULE_MISSING else outcome
    except ImportError as exc:
        if "cannot import name" in str(exc):
            return Outcome(NAME_MISSING, str(target.name))
        return Outcome(ERROR, f"{type(exc).__name__}: {exc}"[:300])
    except BaseException as exc:  # noqa: BLE001 - same as above
        return Outcome(ERROR, f"{type(exc).__name__}: {exc}"[:300])
    return Outcome(OK)


def worker_main() -> None:
    """Read targets as JSON from stdin; write one JSON outcome per line to the original stdout."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # whatever imported modules print goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    for module, name in json.loads(sys.stdin.read()):
        outcome = check_target(Target(module, name))
        out.write(json.dumps(asdict(outcome)) + "\n")
        out.flush()


# ---------------------------------------------------------------- driver side


def _run_group(targets: Sequence[Target], timeout: float) -> dict[Target, Outcome]:
    """Check targets in a worker; when it dies or stalls, blame the target in flight and restart after it."""
    results: dict[Target, Outcome] = {}
    pending = list(targets)
    with tempfile.TemporaryDirectory(prefix="check_imports_") as scratch:
        while pending:
            proc = subprocess.Popen(
                [sys.executable, "-u", str(Path(__file__).resolve()), "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=scratch,
                text=True,
            )
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps([[t.module, t.name] for t in pending]))
            proc.stdin.close()
            selector = selectors.DefaultSelector()
            selector.register(proc.stdout, selectors.EVENT_READ)
            done = 0
            deadline = time.monotonic() + timeout
            failure: Outcome | None = None
            while done < len(pending):
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    failure = Outcome(TIMEOUT, f"no answer within {timeout:.0f}s")
                    break
                raw = proc.stdout.readline()
                if not raw:
                    failure = Outcome(CRASH, f"worker exited with {proc.wait()}")
                    break
                results[pending[done]] = Outcome(**json.loads(raw))
                done += 1
                deadline = time.monotonic() + timeout
            selector.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            if failure is not None:
                results[pending[done]] = failure
                done += 1
            pending = pending[done:]
    return results


def check_targets(targets: Iterable[Target], timeout: float = 180.0) -> dict[Target, Outcome]:
    """Outcome of every distinct target, one worker process per module group."""
    groups: dict[str, list[Target]] = defaultdict(list)
    for target in sorted(set(targets), key=lambda t: (t.module, t.name or "")):
        groups[target.group].append(target)
    results: dict[Target, Outcome] = {}
    for group in sorted(groups):
        results.update(_run_group(groups[group], timeout))
    return results


def verl_identity() -> dict[str, str | None]:
    """Where this interpreter finds ``verl`` and which version it reports, without importing it."""
    spec = importlib.util.find_spec("verl")
    try:
        version = importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        version = None
    location = None
    if spec is not None and spec.submodule_search_locations:
        location = list(spec.submodule_search_locations)[0]
    return {"python": sys.executable, "verl_path": location, "verl_version": version}


def measure(lines: Sequence[str], timeout: float = 180.0) -> dict:
    """Check every line; return the JSON-ready report."""
    parsed = {line: parse_line(line) for line in lines}
    outcomes = check_targets((t for targets in parsed.values() for t in targets), timeout)
    results = []
    for line, targets in parsed.items():
        failures = [
            {"module": t.module, "name": t.name, **asdict(outcomes[t])} for t in targets if outcomes[t].status != OK
        ]
        results.append(LineResult(line, not failures, failures))
    resolving = sum(r.resolves for r in results)
    return {
        **verl_identity(),
        "lines_total": len(results),
        "lines_resolving": resolving,
        "share_resolving": round(resolving / len(results), 4) if results else None,
        "lines": [asdict(r) for r in results],
    }


def missing_by_module(report: dict, only_lines: set[str] | None = None) -> list[dict]:
    """Failed targets grouped by module, each with the lines it blocks; busiest modules first."""
    modules: dict[str, dict[tuple, set[str]]] = defaultdict(lambda: defaultdict(set))
    for entry in report["lines"]:
        if only_lines is not None and entry["line"] not in only_lines:
            continue
        for failure in entry["failures"]:
            key = (failure["name"], failure["status"], failure["detail"])
            modules[failure["module"]][key].add(entry["line"])
    grouped = []
    for module, keys in modules.items():
        blocked = set().union(*keys.values())
        names = [
            {"name": name, "status": status, "detail": detail, "lines": len(lines)}
            for (name, status, detail), lines in sorted(keys.items(), key=lambda kv: (-len(kv[1]), str(kv[0][0])))
        ]
        grouped.append({"module": module, "lines": len(blocked), "names": names})
    return sorted(grouped, key=lambda g: (-g["lines"], g["module"]))


def format_report(report: dict, reference: dict | None = None) -> str:
    """Human-readable summary; with a reference report, also what blocks lines the reference resolves."""
    out = [
        f"python {report['python']}",
        f"verl {report['verl_version']} at {report['verl_path']}",
        f"lines resolving: {report['lines_resolving']}/{report['lines_total']}"
        + (f" ({100 * report['share_resolving']:.1f}%)" if report["share_resolving"] is not None else ""),
    ]

    def section(title: str, groups: list[dict]) -> None:
        out.append("")
        out.append(title)
        for group in groups:
            out.append(f"  {group['module']}  ({group['lines']} lines)")
            for item in group["names"]:
                what = "<module>" if item["name"] is None else item["name"]
                detail = f": {item['detail']}" if item["detail"] and item["status"] != NAME_MISSING else ""
                out.append(f"    {what:<40} {item['status']}{detail}  [{item['lines']}]")

    section("failures by module:", missing_by_module(report))
    if reference is not None:
        resolving = {entry["line"] for entry in reference["lines"] if entry["resolves"]}
        here = {entry["line"] for entry in report["lines"]}
        compared = resolving & here
        ok_here = sum(entry["resolves"] for entry in report["lines"] if entry["line"] in compared)
        out.append("")
        out.append(
            f"of {len(compared)} lines resolving with the reference (verl {reference.get('verl_version')}), "
            f"{ok_here} resolve here"
        )
        section("missing here, among lines the reference resolves:", missing_by_module(report, compared))
        # Lines the reference fails only for want of an optional package (vllm, megatron, ...) are still its
        # surface: they must import here too, even where using them needs the extra.
        extra_only = {
            entry["line"]
            for entry in reference["lines"]
            if entry["failures"] and all(f["status"] in (DEPENDENCY_MISSING, ERROR) for f in entry["failures"])
        } & here
        section(
            f"missing here, among {len(extra_only)} lines the reference fails only for an optional dependency:",
            missing_by_module(report, extra_only),
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sample", nargs="?", type=Path, default=DEFAULT_SAMPLE, help="file of import lines")
    parser.add_argument("--json", type=Path, help="also write the full report here")
    parser.add_argument("--reference", type=Path, help="a --json report from another interpreter to compare with")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds one import may take")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    report = measure(read_sample(args.sample), args.timeout)
    reference = json.loads(args.reference.read_text(encoding="utf-8")) if args.reference else None
    print(format_report(report, reference))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
