"""Check that a merged folder is a complete Hugging Face model before anyone is told it is ready."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

__all__ = ["validate_hf_model_output"]

_SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _non_empty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _index_problem(folder: Path, index_path: Path) -> str | None:
    """None when the index names only existing, non-empty shards inside ``folder``; else what is wrong."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, json.JSONDecodeError) as exc:
        return f"{index_path.name} is not valid JSON ({exc})"
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return f"{index_path.name} has no weight_map"
    for shard in sorted(set(weight_map.values())):
        parts = PurePosixPath(str(shard)).parts
        if not shard or PurePosixPath(str(shard)).is_absolute() or ".." in parts:
            return f"{index_path.name} names a shard outside the folder: {shard!r}"
        if not _non_empty(folder.joinpath(*parts)):
            return f"{index_path.name} names a missing or empty shard {shard!r}"
    return None


def validate_hf_model_output(target_dir: str | Path) -> None:
    """Raise RuntimeError naming what is missing unless ``target_dir`` has a readable config.json and complete
    weights (one weights file, or an index whose shards are all there)."""
    folder = Path(target_dir)
    problems: list[str] = []
    config = folder / "config.json"
    if not _non_empty(config):
        problems.append("config.json is missing or empty")
    else:
        try:
            if not isinstance(json.loads(config.read_text(encoding="utf-8")), dict):
                problems.append("config.json does not hold a JSON object")
        except (OSError, UnicodeError, json.JSONDecodeError) as exc:
            problems.append(f"config.json is not valid JSON ({exc})")
    complete = any(_non_empty(folder / name) for name in _SINGLE_FILES)
    index_problems = []
    for name in _INDEX_FILES:
        if (folder / name).exists():
            problem = _index_problem(folder, folder / name)
            complete = complete or problem is None
            if problem:
                index_problems.append(problem)
    if not complete:
        problems += index_problems or [f"no weights ({', '.join(_SINGLE_FILES + _INDEX_FILES)})"]
    if problems:
        raise RuntimeError(f"the merged model at {folder} is incomplete: {'; '.join(problems)}")
