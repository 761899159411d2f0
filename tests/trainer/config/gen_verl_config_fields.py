"""Regenerate verl_0_9_1_config_fields.json: the field names of verl 0.9.1's config dataclasses.

Reads an unpacked verl 0.9.1 package with ``ast`` (nothing of it is imported) and records, per public class name,
the module it is defined in and every dataclass field it has, inherited ones included. The classes are those of
verl/workers/config/*.py and verl/trainer/config/*.py, and every ``*Config`` class named by a ``_target_`` in
verl/trainer/config/**.yaml. test_verl_field_parity.py reads the JSON; it never needs the unpacked package.

    python tests/trainer/config/gen_verl_config_fields.py /tmp/upverl
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

OUT = Path(__file__).with_name("verl_0_9_1_config_fields.json")
CONFIG_MODULES = ("verl/workers/config", "verl/trainer/config")
_TARGET = re.compile(r"_target_:\s*([\w.]+)")


def _module_name(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def _is_dataclass(node: ast.ClassDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _is_classvar(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return ast.unparse(target).split(".")[-1] == "ClassVar"


def _own_fields(node: ast.ClassDef) -> list[str]:
    return [
        stmt.target.id
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not _is_classvar(stmt.annotation)
    ]


def _parse(root: Path, path: Path, classes: dict) -> None:
    module = _module_name(root, path)
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.ClassDef) and _is_dataclass(node):
            bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
            classes.setdefault(node.name, []).append({"module": module, "bases": bases, "own": _own_fields(node)})


def _fields(name: str, classes: dict, module: str | None = None) -> list[str]:
    """Fields in dataclass order: bases first (last base first, as the MRO merges them), then the class's own."""
    defs = classes.get(name)
    if not defs:
        return []  # a non-dataclass base (Mapping, ABC, ...)
    entry = next((d for d in defs if d["module"] == module), defs[0])
    names: list[str] = []
    for base in reversed(entry["bases"]):
        names += [f for f in _fields(base, classes) if f not in names]
    return names + [f for f in entry["own"] if f not in names]


def generate(root: Path) -> dict:
    classes: dict = {}
    for folder in CONFIG_MODULES:
        for path in sorted((root / folder).glob("*.py")):
            _parse(root, path, classes)
    wanted = {
        (cls["module"], name)
        for name, defs in classes.items()
        for cls in defs
        if not name.startswith("_") and cls["module"].startswith(tuple(m.replace("/", ".") for m in CONFIG_MODULES))
    }
    # *Config classes named by the YAML that live elsewhere (profiler, skip, ...): parse their modules too
    targets = set()
    for path in sorted((root / "verl/trainer/config").rglob("*.yaml")):
        targets |= {t for t in _TARGET.findall(path.read_text()) if t.endswith("Config") and t.startswith("verl.")}
    for target in sorted(targets):
        name = target.rsplit(".", 1)[1]
        if name not in classes:
            for path in sorted((root / "verl").rglob("*.py")):
                if re.search(rf"^class {name}\b", path.read_text(), re.M):
                    _parse(root, path, classes)
        for cls in classes.get(name, []):
            wanted.add((cls["module"], name))
    # a base class of a wanted class defined outside the scanned folders (BaseConfig, ...) is needed for its fields
    for path in sorted((root / "verl").glob("*.py")):
        _parse(root, path, classes)
    result = {}
    for module, name in sorted(wanted, key=lambda mn: (mn[0], mn[1])):
        result.setdefault(name, {"module": module, "fields": _fields(name, classes, module)})
    return {
        "verl_version": "0.9.1",
        "yaml_targets": sorted(t for t in targets),
        "classes": dict(sorted(result.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verl_root", type=Path, help="the folder that holds verl 0.9.1's verl/ package")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.write_text(json.dumps(generate(args.verl_root), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
