"""How much of the subclass API of verl's trainers, task runners and RL data set this package offers.

Recipes subclass verl's ``RayPPOTrainer`` (and the task runners, the async trainers, ``RLHFDataset``) and reach
everything those classes define: their methods, and the attributes their methods set on ``self``. This script reads
those names from the verl wheel's sources (``ast``, nothing of the wheel is imported or unpacked) and looks for each
one on our class of the same module path: a method, property or class attribute anywhere in its MRO, or an attribute
some method of the MRO assigns to ``self``.

    python tests/compat/verl_surface.py            # the table, the share and every missing name
    python tests/compat/verl_surface.py --json out.json

A name we do not offer on purpose is listed, with the reason, in docs/migrating_from_verl.md (the test
``test_verl_surface.py`` checks that every missing name is).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import sys
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_verl_cpu_suite import DEFAULT_CACHE, DEFAULT_VERSION, download_wheel  # noqa: E402

# (module path, class name): the classes whose subclass API recipes rely on
CLASSES: tuple[tuple[str, str], ...] = (
    ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer"),
    ("verl.trainer.main_ppo_v0", "BaseTaskRunner"),
    ("verl.trainer.main_ppo_v0", "TaskRunner"),
    ("verl.experimental.separation.ray_trainer", "SeparateRayPPOTrainer"),
    ("verl.experimental.one_step_off_policy.ray_trainer", "OneStepOffRayTrainer"),
    ("verl.experimental.one_step_off_policy.main_ppo", "OneStepTaskRunner"),
    ("verl.experimental.fully_async_policy.fully_async_trainer", "FullyAsyncTrainer"),
    ("verl.experimental.fully_async_policy.fully_async_main", "FullyAsyncTaskRunner"),
    ("verl.utils.dataset.rl_dataset", "RLHFDataset"),
)


@dataclass
class ClassSurface:
    module: str
    name: str
    wanted: list[str]
    missing: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def present(self) -> int:
        return len(self.wanted) - len(self.missing)


def names_defined(class_node: ast.ClassDef) -> set[str]:
    """Methods and class attributes of ``class_node``, and every ``self.<name> = ...`` inside it."""
    names: set[str] = set()
    for node in class_node.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in ast.walk(class_node):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return names


def upstream_names(wheel: Path, module: str, name: str) -> list[str]:
    """The names ``name`` in ``module`` of the wheel defines (its own body only, not its bases)."""
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(module.replace(".", "/") + ".py").decode()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return sorted(names_defined(node))
    raise LookupError(f"{wheel.name}: no class {name} in {module}")


def our_names(module: str, name: str) -> set[str]:
    """Everything our class of that path offers: ``dir()`` plus the ``self.`` attributes set in its MRO."""
    cls = getattr(importlib.import_module(module), name)
    cls = getattr(cls, "__ray_actor_class__", cls)  # a Ray actor class: the class it wraps
    names = set(dir(cls))
    for klass in inspect.getmro(cls):
        if not klass.__module__.startswith("verl."):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        names |= names_defined(tree.body[0])
    return names


def measure(wheel: Path) -> list[ClassSurface]:
    surfaces = []
    for module, name in CLASSES:
        surface = ClassSurface(module, name, upstream_names(wheel, module, name))
        try:
            ours = our_names(module, name)
        except (ImportError, AttributeError) as err:
            surface.error = f"{type(err).__name__}: {err}"
            surface.missing = list(surface.wanted)
        else:
            surface.missing = [n for n in surface.wanted if n not in ours]
        surfaces.append(surface)
    return surfaces


def share(surfaces: list[ClassSurface]) -> float:
    return sum(s.present for s in surfaces) / sum(len(s.wanted) for s in surfaces)


def report(surfaces: list[ClassSurface]) -> str:
    lines = ["| class | present | missing |", "|---|---|---|"]
    for s in surfaces:
        missing = s.error or ", ".join(f"`{n}`" for n in s.missing) or "-"
        lines.append(f"| `{s.module}.{s.name}` | {s.present}/{len(s.wanted)} | {missing} |")
    total = sum(len(s.wanted) for s in surfaces)
    lines.append(f"\nshare present: {sum(s.present for s in surfaces)}/{total} = {share(surfaces):.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default=DEFAULT_VERSION)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    surfaces = measure(download_wheel(args.version, args.cache))
    print(report(surfaces))
    if args.json:
        data = [{"class": f"{s.module}.{s.name}", "wanted": s.wanted, "missing": s.missing} for s in surfaces]
        args.json.write_text(json.dumps({"share": share(surfaces), "classes": data}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
