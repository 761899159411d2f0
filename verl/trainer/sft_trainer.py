"""verl's SFT command line: ``torchrun --nproc_per_node N -m verl.trainer.sft_trainer data.train_files=... ...``.

Config: ``verl/trainer/config/sft_trainer_engine.yaml`` with the ``model``, ``engine`` and ``optim`` groups, keys as in
verl 0.9.1 (docs/sft.md). Rows are conversations in ``data.messages_key``; the loss covers the assistant turns. Each
save writes ``{trainer.default_local_dir}/global_step_{k}/`` (resumable with ``trainer.resume_mode=auto``), and
``python -m verl.model_merger merge --backend fsdp --local_dir .../global_step_{k} --target_dir <out>`` turns it into
a Hugging Face folder. The training itself is :class:`verl.trainer.sft.trainer.SFTTrainer`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import hydra
from omegaconf import DictConfig, OmegaConf

from verl.trainer.sft.cli import run_translated, train_or_exit
from verl.trainer.sft.config import SFTConfig
from verl.trainer.sft.dataset import SFTDataset
from verl.trainer.sft.engine_keys import engine_tree_to_sft_config
from verl.trainer.sft.trainer import SFTTrainer as _SFTTrainer
from verl.utils.config_builder import as_config
from verl.utils.dataset.config import SFTDatasetConfig
from verl.utils.dataset.sft_dataset import legacy_data_view, select_rows

__all__ = ["SFTTrainer", "create_sft_dataset", "main", "run_sft"]


class SFTTrainer(_SFTTrainer):
    """verl's ``SFTTrainer(config)``: ``config`` is a composed ``sft_trainer_engine`` tree (or an SFTConfig);
    ``fit()`` trains and returns the last ``global_step_{k}`` folder."""

    def __init__(self, config: SFTConfig | DictConfig | dict[str, Any], **kwargs: Any) -> None:
        if not isinstance(config, SFTConfig):
            tree = (
                cast(dict[str, Any], OmegaConf.to_container(config, resolve=True))
                if isinstance(config, DictConfig)
                else dict(config)
            )
            config = engine_tree_to_sft_config(tree)
        super().__init__(config, **kwargs)


def run_sft(config: DictConfig | dict[str, Any]) -> Path:
    """Train from a composed ``sft_trainer_engine`` config; returns the last ``global_step_{k}`` folder."""
    return run_translated(config, engine_tree_to_sft_config)


def create_sft_dataset(
    data_paths: str | list[str], data_config: Any, tokenizer: Any, processor: Any = None, max_samples: int = -1
) -> Any:
    """The conversation dataset verl's SFT trainer reads (``data.custom_cls`` when it names one).

    ``data_config`` is the ``data`` group (messages_key, tools_key, max_length, truncation, ...; an
    :class:`~verl.utils.dataset.config.SFTDatasetConfig`, DictConfig or dict). A custom class receives it as given.
    ``max_samples`` keeps that many conversations: the first ones, or a draw seeded by ``data.seed`` when
    ``data.shuffle`` (as verl's ``MultiTurnSFTDataset``). ``processor`` is for multimodal models, which this trainer
    does not handle: it must be None.
    """
    if processor is not None:
        raise ValueError("create_sft_dataset: multimodal processors are not supported; pass processor=None")
    data = as_config(data_config, SFTDatasetConfig, "data")
    if data.custom_cls.path:
        from verl.utils.import_utils import load_extern_object

        cls = load_extern_object(
            data.custom_cls.path, data.custom_cls.name or "", config_key="data.custom_cls.path", what="dataset class"
        )
        return cls(parquet_files=data_paths, tokenizer=tokenizer, config=data_config, max_samples=max_samples)
    dataset = SFTDataset(data_paths, tokenizer, legacy_data_view(data, data_paths, multiturn=True))
    keep = select_rows(len(dataset), max_samples, data.shuffle, data.seed)
    if keep is not None:
        from torch.utils.data import Subset

        return Subset(dataset, keep)
    return dataset


@hydra.main(config_path="config", config_name="sft_trainer_engine", version_base=None)
def main(config: DictConfig) -> None:
    train_or_exit(config, engine_tree_to_sft_config)


if __name__ == "__main__":
    main()
