"""Defaults of verl's config blocks that this build accepts but does not act on (profilers, Megatron LoRA, ...;
``global_profiler.tool`` and ``distillation.enabled`` are the only keys of them read anywhere).

Each block is one YAML file under ``verl/trainer/config/inert/``: Hydra composes it into the groups (so that verl's
``key=value`` overrides of these keys parse, and typos in them fail by name), and the dataclass field that holds the
block takes its default from the same file, so the two cannot drift. ``verl.trainer.config.inert_keys`` names every
leaf a user sets to something else, with the reason it has no effect.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

__all__ = ["INERT_BLOCK_DIR", "inert_block"]

INERT_BLOCK_DIR = Path(__file__).resolve().parents[2] / "trainer" / "config" / "inert"


@functools.cache
def _load(name: str) -> dict[str, Any]:
    path = INERT_BLOCK_DIR / f"{name}.yaml"
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: an inert block must be a mapping")
    return data


def inert_block(name: str) -> dict[str, Any]:
    """A fresh copy of the default block ``inert/<name>.yaml``."""
    return copy.deepcopy(_load(name))
