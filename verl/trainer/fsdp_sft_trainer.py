"""verl's older SFT command line: ``torchrun --nproc_per_node N -m verl.trainer.fsdp_sft_trainer ...``.

Config: ``verl/trainer/config/sft_trainer_legacy.yaml`` with that trainer's keys (``model.partial_pretrain``,
``data.prompt_key``/``response_key`` and their ``*_dict_keys``, ``data.multiturn.*``, ``optim.lr_scheduler``,
``trainer.checkpoint.*``; docs/sft.md). It runs the same :class:`~verl.trainer.sft.trainer.SFTTrainer` as
``verl.trainer.sft_trainer`` and writes the same ``global_step_{k}/`` checkpoints.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from verl.trainer.sft.cli import run_translated, train_or_exit
from verl.trainer.sft.legacy_keys import legacy_tree_to_sft_config

__all__ = ["extract_step", "main", "run_sft"]


def extract_step(path: str) -> int | None:
    """The ``k`` of the first ``global_step_{k}`` in ``path``, or None."""
    match = re.search(r"global_step_(\d+)", str(path))
    return int(match.group(1)) if match else None


def run_sft(config: DictConfig | dict[str, Any]) -> Path:
    """Train from a composed ``sft_trainer_legacy`` config; returns the last ``global_step_{k}`` folder."""
    return run_translated(config, legacy_tree_to_sft_config)


@hydra.main(config_path="config", config_name="sft_trainer_legacy", version_base=None)
def main(config: DictConfig) -> None:
    train_or_exit(config, legacy_tree_to_sft_config)


if __name__ == "__main__":
    main()
