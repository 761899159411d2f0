"""``python -m verl.experimental.fully_async_policy.fully_async_main key=value ...``: the fully-async recipe.

The config is ``config/fully_async_ppo_trainer.yaml`` beside this file (it extends ``ppo_trainer``); the machinery
lives in this package (rollouter, message queue, trainer).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from verl.experimental.separation.entry import recipe_main

__all__ = ["CONFIG_DIR", "CONFIG_NAME", "main"]

CONFIG_DIR = Path(__file__).resolve().parent / "config"
CONFIG_NAME = "fully_async_ppo_trainer"


def main(argv: Sequence[str] | None = None) -> dict:
    return recipe_main(CONFIG_DIR, CONFIG_NAME, "fully_async", argv)


if __name__ == "__main__":
    main()
