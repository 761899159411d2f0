"""Split the recipe import sample by whether verl ever released what each line imports.

Forks add names to upstream modules (a new loss in ``core_algos``, a reward scorer under
``utils.reward_score``) and recipes built on those forks import them. Such names were never part of
verl's public surface, so the compatibility share must not count them against us. A name that some
release shipped, however old, still counts: recipes written against that release import it.

The script fetches every verl wheel from the package index (cached in ``--releases-dir``), reads each
release's modules statically with ``ast`` (releases need GPUs and extras to import), and sorts every
line of ``recipe_imports.txt`` and ``recipe_imports_fork_only.txt`` into three classes:

* ``latest``: every module and name exists in the newest release;
* ``older``: not all in the newest release, but each exists in some release;
* ``never``: at least one module or name exists in no release (a fork invention).

With ``--write`` the ``never`` lines go to the fork-only file and the rest to the sample, both sorted
and deduplicated, so rerunning after a new release moves lines back where they now belong::

    python tests/compat/classify_imports.py --releases-dir /tmp/verl_releases           # report only
    python tests/compat/classify_imports.py --releases-dir /tmp/verl_releases --write   # apply the split
    python tests/compat/classify_imports.py --releases-dir /tmp/verl_releases --failures ours.json

``--failures`` takes a ``check_imports.py --json`` report and lists the released names it misses,
each with the newest release that has it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import subprocess
import sys
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from functools import cached_property
from pathlib import Path

from packaging.version import InvalidVersion, Version

HERE = Path(__file__).parent
DEFAULT_SAMPLE = HERE / "recipe_imports.txt"
DEFAULT_FORK_ONLY = HERE / "recipe_imports_fork_only.txt"
DEFAULT_RELEASES_DIR = Path("/tmp/verl_releases")
PACKAGE = "verl"

LATEST = "latest"  # everything exists in the newest release
OLDER = "older"  # everything exists in some release, not all of it in the newest
NEVER = "never"  # some module or name exists in no release

_COMPOUND_BLOCKS = ("body", "orelse", "finalbody", "handlers")


# ---------------------------------------------------------------- fetching releases


def index_versions(package: str = PACKAGE) -> list[str]:
    """Every version of ``package`` the configured index lists, via pip's own client."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if match is None:  # older pips lack `index`; the error of an unsatisfiable pin lists them instead
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"{package}==", "--no-deps", "-d", "/dev/null"],
            capture_output=True,
            text=True,
            check=False,
        )
        match = re.search(r"\(from versions:\s*([^)]*)\)", proc.stderr)
    if match is None:
        raise RuntimeError(f"could not list versions of {package!r} from the index; pip said: {proc.stderr[-500:]}")
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


def wheel_version(path: Path) -> str:
    """The version a wheel's METADATA declares (file names may normalize it differently)."""
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(zf.read(meta).decode("utf-8", "replace"))["Version"]


def cached_wheels(releases_dir: Path, package: str = PACKAGE) -> dict[Version, Path]:
    """Wheels of ``package`` already in ``releases_dir``, by version."""
    found: dict[Version, Path] = {}
    for path in sorted(releases_dir.glob(f"{package}-*.whl")):
        try:
            found[Version(wheel_version(path))] = path
        except (zipfile.BadZipFile, StopIteration, InvalidVersion, TypeError) as exc:
            print(f"skipping unreadable wheel {path}: {exc}", file=sys.stderr)
    return found


def fetch_releases(releases_dir: Path, offline: bool = False, package: str = PACKAGE) -> dict[Version, Path]:
    """Download the wheels missing from ``releases_dir`` (unless offline); return all cached, by version."""
    releases_dir.mkdir(parents=True, exist_ok=True)
    have = cached_wheels(releases_dir, package)
    if not offline:
        for raw in index_versions(package):
            if Version(raw) in have:
                continue
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", f"{package}=={raw}", "--no-deps", "--only-binary=:all:"]
                + ["-q", "-d", str(releases_dir)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode:
                print(f"skipping {package}=={raw}: pip download failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        have = cached_wheels(releases_dir, package)
    if not have:
        raise RuntimeError(f"no {package} wheels in {releases_dir}; run without --offline to download them")
    return dict(sorted(have.items()))


# ---------------------------------------------------------------- static surface of one release


@dataclass
class ModuleSource:
    """One module of a release: its source (None for namespace dirs and extensions) and whether it is a package."""

    name: str
    source: str | None
    is_package: bool


@dataclass
class Bindings:
    """Top-level names a module binds, its star imports, and its ``__all__`` expression if any."""

    names: set[str] = field(default_factory=set)
    imported_modules: dict[str, str] = field(default_factory=dict)  # bound name -> module it refers to
    star_sources: list[str] = field(default_factory=list)
    all_nodes: list[ast.AST] = field(default_factory=list)  # assignments / augmentations of __all__, in order


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    if not level:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def _top_level_statements(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements run at import time: the module body and the blocks of its if/try/with/for/match."""
    for node in body:
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for attr in _COMPOUND_BLOCKS:
            for child in getattr(node, attr, None) or []:
                yield from _top_level_statements(child.body if isinstance(child, ast.ExceptHandler) else [child])
        for case in getattr(node, "cases", None) or []:
            yield from _top_level_statements(case.body)


def _target_names(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def collect_bindings(mod: ModuleSource) -> Bindings:
    """Names bound at module level; a module that does not parse binds nothing but its submodules."""
    out = Bindings()
    if mod.source is None:
        return out
    try:
        tree = ast.parse(mod.source)
    except SyntaxError:
        return out
    for node in _top_level_statements(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                out.names.update(_target_names(target))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                out.all_nodes.append(node)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            out.names.add(node.target.id)
            if node.target.id == "__all__":
                out.all_nodes.append(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "__all__":
                out.all_nodes.append(node)
        elif isinstance(node, ast.For | ast.AsyncFor):
            out.names.update(_target_names(node.target))
        elif isinstance(node, ast.With | ast.AsyncWith):
            for target in (item.optional_vars for item in node.items):
                if target is not None:
                    out.names.update(_target_names(target))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                out.names.add(bound)
                out.imported_modules[bound] = alias.name if alias.asname else bound
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_relative(mod.name, mod.is_package, node.level, node.module)
            for alias in node.names:
                if alias.name == "*":
                    out.star_sources.append(source)
                    continue
                bound = alias.asname or alias.name
                out.names.add(bound)
                out.imported_modules[bound] = f"{source}.{alias.name}"
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.names.add(node.name)
    return out


class Release:
    """The statically known import surface of one release: its modules and the names each one offers."""

    def __init__(self, version: Version, modules: dict[str, ModuleSource]) -> None:
        self.version = version
        self.modules = modules
        self._bindings: dict[str, Bindings] = {}
        self._names: dict[str, tuple[frozenset[str], bool]] = {}
        self._exports: dict[str, tuple[frozenset[str], bool]] = {}

    @classmethod
    def from_wheel(cls, path: Path, version: Version, package: str = PACKAGE) -> Release:
        modules: dict[str, ModuleSource] = {}
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                parts = member.split("/")
                if parts[0] != package or not parts[-1].endswith((".py", ".so", ".pyd")):
                    continue
                stem = parts[-1].split(".")[0]
                for depth in range(1, len(parts)):  # directories above a module are (namespace) packages
                    modules.setdefault(".".join(parts[:depth]), ModuleSource(".".join(parts[:depth]), None, True))
                if stem == "__init__":
                    name = ".".join(parts[:-1])
                    modules[name] = ModuleSource(name, zf.read(member).decode("utf-8", "replace"), True)
                elif parts[-1].endswith(".py"):
                    name = ".".join(parts[:-1] + [stem])
                    modules[name] = ModuleSource(name, zf.read(member).decode("utf-8", "replace"), False)
                else:  # compiled extension: present, contents unknown
                    name = ".".join(parts[:-1] + [stem])
                    modules.setdefault(name, ModuleSource(name, None, False))
        return cls(version, modules)

    @cached_property
    def submodules(self) -> dict[str, set[str]]:
        children: dict[str, set[str]] = defaultdict(set)
        for name in self.modules:
            parent, _, child = name.rpartition(".")
            if parent:
                children[parent].add(child)
        return children

    def bindings(self, module: str) -> Bindings:
        if module not in self._bindings:
            self._bindings[module] = collect_bindings(self.modules[module])
        return self._bindings[module]

    def names(self, module: str, _stack: frozenset[str] = frozenset()) -> tuple[frozenset[str], bool]:
        """Names ``from module import NAME`` can fetch, and whether an unknowable star import may add more."""
        if module in self._names:
            return self._names[module]
        found = set(self.bindings(module).names) | self.submodules.get(module, set())
        is_open = self.modules[module].source is None and not self.modules[module].is_package
        for source in self.bindings(module).star_sources:
            exported, source_open = self.exports(source, _stack | {module})
            found |= exported
            is_open = is_open or source_open
        result = (frozenset(found), is_open)
        if not _stack:
            self._names[module] = result
        return result

    def exports(self, module: str, _stack: frozenset[str] = frozenset()) -> tuple[frozenset[str], bool]:
        """What ``from module import *`` binds, and whether that is only partly knowable."""
        if module in self._exports:
            return self._exports[module]
        if module in _stack:
            return frozenset(), False
        if module in self.modules:
            declared = self._declared_all(module, _stack)
            if declared is not None:
                result = (frozenset(declared), False)
            else:
                names, is_open = self.names(module, _stack)
                result = (frozenset(n for n in names if not n.startswith("_")), is_open)
        elif module.split(".")[0] in sys.stdlib_module_names:
            imported = importlib.import_module(module)
            names = getattr(imported, "__all__", None) or [n for n in vars(imported) if not n.startswith("_")]
            result = (frozenset(names), False)
        elif module.split(".")[0] == PACKAGE:
            result = (frozenset(), False)  # a verl module this release lacks: importing it would fail anyway
        else:
            result = (frozenset(), True)  # a third-party package's names are unknowable here
        if not _stack:
            self._exports[module] = result
        return result

    def _declared_all(self, module: str, stack: frozenset[str]) -> set[str] | None:
        """Evaluate ``__all__`` from literals, other modules' ``__all__`` and ``+``; None when it is not static."""
        bindings = self.bindings(module)
        if not bindings.all_nodes:
            return None

        def value(expr: ast.expr) -> set[str] | None:
            if isinstance(expr, ast.List | ast.Tuple | ast.Set):
                items = [e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                return set(items) if len(items) == len(expr.elts) else None
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
                left, right = value(expr.left), value(expr.right)
                return None if left is None or right is None else left | right
            if isinstance(expr, ast.Attribute) and expr.attr == "__all__" and isinstance(expr.value, ast.Name):
                other = bindings.imported_modules.get(expr.value.id)
                if other in self.modules and other not in stack:
                    return self._declared_all(other, stack | {module})
            return None

        declared: set[str] | None = set()
        for node in bindings.all_nodes:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                declared = value(node.value) if node.value is not None else None
            elif isinstance(node, ast.AugAssign):
                extra = value(node.value)
                declared = None if declared is None or extra is None else declared | extra
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                call = node.value
                method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
                arg = call.args[0] if len(call.args) == 1 else None
                if method == "extend" and arg is not None:
                    extra = value(arg)
                elif method == "append" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    extra = {arg.value}
                else:
                    extra = None
                declared = None if declared is None or extra is None else declared | extra
            if declared is None:
                return None
        return declared

    def has(self, module: str, name: str | None) -> bool | None:
        """True if the target exists, False if not, None if only an opaque star import could supply it."""
        if module not in self.modules:
            return False
        if name is None or name == "*":  # a star import needs only the module
            return True
        names, is_open = self.names(module)
        if name in names:
            return True
        return None if is_open else False


# ---------------------------------------------------------------- classifying lines


@dataclass(frozen=True)
class Target:
    """One imported name (``from module import name``) or module (``import module``, name None)."""

    module: str
    name: str | None = None

    def __str__(self) -> str:
        return self.module if self.name is None else f"{self.module}.{self.name}"


@dataclass
class Verdict:
    """A line's class, the newest release that has all of it, and the targets no release has."""

    line: str
    klass: str
    newest_release: str | None
    never_released: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)  # may come from a third-party star import


def parse_line(line: str) -> list[Target]:
    """The targets of one absolute import statement; raise ValueError naming the line otherwise."""
    try:
        [node] = ast.parse(line).body
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"not a single Python statement: {line!r}") from exc
    if isinstance(node, ast.Import):
        return [Target(alias.name) for alias in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return [Target(node.module, alias.name) for alias in node.names]
    raise ValueError(f"not an absolute import statement: {line!r}")


def newest_with(releases: Sequence[Release], target: Target) -> Release | None:
    """The newest release that has the target, counting an opaque star import as having it."""
    for release in reversed(releases):
        if release.has(target.module, target.name) is not False:
            return release
    return None


def classify(line: str, releases: Sequence[Release]) -> Verdict:
    """Class of one line against releases sorted oldest first."""
    targets = parse_line(line)
    never = [str(t) for t in targets if newest_with(releases, t) is None]
    uncertain = sorted(
        {str(t) for t in targets for r in releases if r.has(t.module, t.name) is None and newest_with(releases, t)}
    )
    if never:
        return Verdict(line, NEVER, None, never, uncertain)
    together = [r for r in releases if all(r.has(t.module, t.name) is not False for t in targets)]
    newest = together[-1] if together else None
    # no single release may hold every name; each did exist, so the line still counts
    klass = LATEST if newest is releases[-1] else OLDER
    return Verdict(line, klass, str(newest.version) if newest else None, [], uncertain)


def read_lines(path: Path) -> list[str]:
    """Non-blank, non-comment lines, as ``check_imports.py`` reads them."""
    if not path.exists():
        return []
    lines = [raw.strip() for raw in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Sorted, deduplicated lines, keeping any leading comment header the file already has."""
    header: list[str] = []
    if path.exists():
        for raw in path.read_text(encoding="utf-8").splitlines():
            if not raw.startswith("#"):
                break
            header.append(raw)
    path.write_text("\n".join(header + sorted(set(lines))) + "\n", encoding="utf-8")


def released_failures(checker_report: dict, verdicts: dict[str, Verdict], releases: Sequence[Release]) -> str:
    """Failing targets of released lines in a ``check_imports.py`` report, by module, with their release."""
    modules: dict[str, dict[str, tuple[str, set[str]]]] = defaultdict(dict)
    for entry in checker_report["lines"]:
        verdict = verdicts.get(entry["line"])
        if verdict is None or verdict.klass == NEVER or entry["resolves"]:
            continue
        for failure in entry["failures"]:
            target = Target(failure["module"], failure["name"])
            release = newest_with(releases, target)
            what = "<module>" if target.name is None else target.name
            where = str(release.version) if release else "none"
            status = failure["status"] + (f" ({failure['detail']})" if failure["status"] != "name_missing" else "")
            key = f"{what:<44} {status:<28} newest release: {where}"
            modules[target.module].setdefault(key, (where, set()))[1].add(entry["line"])
    out = [f"released lines failing in {checker_report.get('python')} (verl {checker_report.get('verl_version')}):"]
    for module in sorted(modules, key=lambda m: (-len(set().union(*(v[1] for v in modules[m].values()))), m)):
        blocked = set().union(*(v[1] for v in modules[module].values()))
        out.append(f"  {module}  ({len(blocked)} lines)")
        for key, (_, lines) in sorted(modules[module].items()):
            out.append(f"    {key}  [{len(lines)}]")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases-dir", type=Path, default=DEFAULT_RELEASES_DIR, help="wheel cache")
    parser.add_argument("--offline", action="store_true", help="use only the wheels already cached")
    parser.add_argument("--sample", type=Path, default=DEFAULT_SAMPLE)
    parser.add_argument("--fork-only", type=Path, default=DEFAULT_FORK_ONLY)
    parser.add_argument("--write", action="store_true", help="rewrite both files with the split")
    parser.add_argument("--json", type=Path, help="also write every line's verdict here")
    parser.add_argument("--failures", type=Path, help="a check_imports.py --json report to explain")
    args = parser.parse_args(argv)

    wheels = fetch_releases(args.releases_dir, args.offline)
    releases = [Release.from_wheel(path, version) for version, path in wheels.items()]
    print(f"releases: {', '.join(str(r.version) for r in releases)}")
    sample, fork_only = read_lines(args.sample), read_lines(args.fork_only)
    verdicts = {line: classify(line, releases) for line in sorted(set(sample) | set(fork_only))}

    by_class: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in verdicts.values():
        by_class[verdict.klass].append(verdict)
    newest = releases[-1].version
    print(f"{len(by_class[LATEST])} lines: all in {newest}")
    print(f"{len(by_class[OLDER])} lines: in an older release, not all in {newest}")
    for v in by_class[OLDER]:
        print(f"    [{v.newest_release or 'split across releases'}] {v.line}")
    print(f"{len(by_class[NEVER])} lines: something in no release")
    for v in by_class[NEVER]:
        origin = "sample" if v.line in sample else "fork-only"
        print(f"    [{origin}] {v.line}    <- {', '.join(v.never_released)}")
    for v in verdicts.values():
        if v.uncertain:
            print(f"  note: {', '.join(v.uncertain)} assumed present via a third-party star import ({v.line})")

    if args.write:
        write_lines(args.sample, [v.line for v in verdicts.values() if v.klass != NEVER])
        write_lines(args.fork_only, [v.line for v in verdicts.values() if v.klass == NEVER])
        print(f"wrote {args.sample} and {args.fork_only}")
    if args.json:
        payload = [v.__dict__ for v in verdicts.values()]
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    if args.failures:
        report = json.loads(args.failures.read_text(encoding="utf-8"))
        print()
        print(released_failures(report, verdicts, releases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
