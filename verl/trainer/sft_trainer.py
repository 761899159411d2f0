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
from verl.trainer.sft.config import SFTConfig, SFTDataConfig, SFTMultiturnConfig
from verl.trainer.sft.dataset import SFTDataset
from verl.trainer.sft.engine_keys import engine_tree_to_sft_config
from verl.trainer.sft.trainer import SFTTrainer as _SFTTrainer

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

    ``data_config`` is the ``data`` group (messages_key, tools_key, max_length, truncation, ...). ``processor`` is for
    multimodal models, which this trainer does not handle: it must be None.
    """
    if processor is not None:
        raise ValueError("create_sft_dataset: multimodal processors are not supported; pass processor=None")

    def get(key: str, default: Any) -> Any:
        value = data_config.get(key, default) if hasattr(data_config, "get") else getattr(data_config, key, default)
        return default if value is None else value

    custom = get("custom_cls", {}) or {}
    if custom.get("path"):
        from verl.utils.import_utils import load_extern_object

        cls = load_extern_object(
            custom["path"], custom.get("name") or "", config_key="data.custom_cls.path", what="dataset class"
        )
        return cls(parquet_files=data_paths, tokenizer=tokenizer, config=data_config, max_samples=max_samples)
    thinking = get("enable_thinking_default", None)
    config = SFTDataConfig(
        train_files=data_paths,
        max_length=get("max_length", 1024),
        truncation=get("truncation", "error"),
        apply_chat_template_kwargs=dict(get("apply_chat_template_kwargs", {})),
        multiturn=SFTMultiturnConfig(
            enable=True,
            messages_key=get("messages_key", "messages"),
            tools_key=get("tools_key", "tools"),
            enable_thinking_key=get("enable_thinking_key", "enable_thinking"),
            enable_thinking_default=None if thinking in (None, "none") else bool(thinking),
        ),
    )
    dataset = SFTDataset(data_paths, tokenizer, config)
    if 0 < max_samples < len(dataset):
        from torch.utils.data import Subset

        dataset = Subset(dataset, range(max_samples))
    return dataset


@hydra.main(config_path="config", config_name="sft_trainer_engine", version_base=None)
def main(config: DictConfig) -> None:
    train_or_exit(config, engine_tree_to_sft_config)


if __name__ == "__main__":
    main()
