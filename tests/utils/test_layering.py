"""Layers point down: verl.utils, verl.single_controller and verl.protocol import nothing from verl.trainer,
verl.workers or verl.experimental, neither at module top nor inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOWER = ("verl/utils", "verl/single_controller", "verl/protocol.py")
UPPER = ("verl.trainer", "verl.workers", "verl.experimental")
# none: verl's public names that the trainer defines (verl.utils.config.validate_config) are served lazily by name
ALLOWED: set[str] = set()


def _lower_files() -> list[Path]:
    files: list[Path] = []
    for entry in LOWER:
        path = ROOT / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def _is_upper(module: str) -> bool:
    return any(module == upper or module.startswith(f"{upper}.") for upper in UPPER)


def test_lower_layers_import_nothing_from_upper_layers():
    files = _lower_files()
    assert len(files) > 50, f"expected the lower-layer modules under {ROOT}, found {len(files)} files"
    offenders = []
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=relative)):
            if any(_is_upper(module) for module in _imported_modules(node)):
                offenders.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "lower layers import upper layers:\n" + "\n".join(offenders)


def test_the_checker_sees_function_level_imports():
    tree = ast.parse("def f():\n    from verl.workers.fsdp import x\n    import verl.trainer.ppo\n")
    found = [module for node in ast.walk(tree) for module in _imported_modules(node) if _is_upper(module)]
    assert "verl.workers.fsdp" in found and "verl.trainer.ppo" in found
