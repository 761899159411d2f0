"""Supervised fine-tuning: parquet prompt/response pairs -> an HF checkpoint that ``main_ppo`` loads as model.path.

Entry point: ``python -m verl.trainer.main_sft`` (docs/sft.md).
"""

from verl.trainer.sft.config import SFTConfig, SFTDataConfig, SFTTrainerConfig, build_sft_config
from verl.trainer.sft.dataset import SFTDataError, SFTDataset
from verl.trainer.sft.trainer import FINAL_CHECKPOINT_NAME, SFTTrainer

__all__ = [
    "FINAL_CHECKPOINT_NAME",
    "SFTConfig",
    "SFTDataConfig",
    "SFTDataError",
    "SFTDataset",
    "SFTTrainer",
    "SFTTrainerConfig",
    "build_sft_config",
]
