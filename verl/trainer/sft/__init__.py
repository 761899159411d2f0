"""Supervised fine-tuning: parquet prompt/response pairs -> an HF checkpoint that ``main_ppo`` loads as model.path.

Entry points (docs/sft.md): ``python -m verl.trainer.main_sft`` (this package's keys), and verl's command lines
``verl.trainer.sft_trainer`` (:mod:`.engine_keys`) and ``verl.trainer.fsdp_sft_trainer`` (:mod:`.legacy_keys`), which
translate their keys to :class:`SFTConfig` and save resumable ``global_step_{k}`` checkpoints (:mod:`.resume`).
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
