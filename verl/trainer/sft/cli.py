"""Shared start of verl's SFT command lines: translate the composed tree, train, and report bad input in one line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from verl.base_config import ConfigError
from verl.trainer.sft.config import SFTConfig
from verl.trainer.sft.dataset import SFTDataError

__all__ = ["run_translated", "train_or_exit"]


def run_translated(config: DictConfig | dict[str, Any], translate: Callable[[dict[str, Any]], SFTConfig]) -> Path:
    """Translate ``config`` (a composed verl tree) with ``translate``, train, and return the last checkpoint."""
    from verl.trainer.sft.trainer import SFTTrainer

    tree = (
        cast(dict[str, Any], OmegaConf.to_container(config, resolve=True))
        if isinstance(config, DictConfig)
        else dict(config)
    )
    return SFTTrainer(translate(tree)).fit()


def train_or_exit(config: DictConfig, translate: Callable[[dict[str, Any]], SFTConfig]) -> None:
    """:func:`run_translated`, turning a config or data mistake into ``error: ...`` on stderr and exit code 2."""
    try:
        run_translated(config, translate)
    except (ConfigError, FileNotFoundError, SFTDataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
