"""Command-line entry of the SFT trainer: ``python -m verl.trainer.main_sft key=value ...``.

Config: ``verl/trainer/config/sft_trainer.yaml`` (groups data, model, optim, trainer; see docs/sft.md). Under
``torchrun --nproc_per_node N -m verl.trainer.main_sft ...`` the processes train one FSDP2-sharded model together.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from verl.base_config import ConfigError
from verl.trainer.sft.config import SFTConfig, build_sft_config
from verl.trainer.sft.dataset import SFTDataError

__all__ = ["main", "run_sft"]


def run_sft(config: SFTConfig | DictConfig) -> Path:
    """Validate ``config``, train, and return the final HF checkpoint folder."""
    from verl.trainer.sft.trainer import SFTTrainer

    return SFTTrainer(build_sft_config(config)).fit()


@hydra.main(config_path="config", config_name="sft_trainer", version_base=None)
def main(config: DictConfig) -> None:
    try:
        typed = build_sft_config(config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        run_sft(typed)
    except (ConfigError, FileNotFoundError, SFTDataError) as exc:
        # Bad input found while loading data or the model: one clear line instead of a traceback.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
