"""verl's ``SFTDataset(parquet_files, tokenizer, config, max_samples=-1)`` over this package's SFT data set.

Older verl releases built the SFT data set from the ``data`` block of ``verl.trainer.fsdp_sft_trainer``'s config:
``prompt_key``/``response_key`` name columns, ``prompt_dict_keys``/``response_dict_keys`` walk into struct columns,
``max_length``/``truncation`` bound the sequence, ``apply_chat_template_kwargs`` go to the chat template, and
``max_samples > 0`` keeps that many rows (a seeded random choice with ``shuffle``, else the first rows). The rows are
tokenized by :class:`verl.utils.dataset.sft_parquet.SFTDataset`, so items are what this package's SFT trainer trains on:
``input_ids``, ``attention_mask``, ``position_ids`` and ``loss_mask``, right-padded to ``max_length``, where
``loss_mask[t] == 1`` iff token ``t`` is produced by the model (the response and its eos).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from verl.utils.config_builder import as_config
from verl.utils.dataset.config import SFTDataConfig, SFTDatasetConfig, SFTMultiturnConfig
from verl.utils.dataset.sft_parquet import SFTDataset as _SFTDataset

__all__ = ["SFTDataset", "legacy_data_view", "select_rows"]


def legacy_data_view(
    config: Any, parquet_files: str | os.PathLike | Sequence[str], multiturn: bool = False
) -> SFTDataConfig:
    """The :class:`SFTDataConfig` that :class:`verl.utils.dataset.sft_parquet.SFTDataset` reads, from an older verl
    ``data`` block (:class:`SFTDatasetConfig`, a DictConfig or a dict) and the files it is built over."""
    data = as_config(config, SFTDatasetConfig, "data")
    if isinstance(parquet_files, str | os.PathLike):
        files = [str(parquet_files)]
    else:
        files = [str(f) for f in parquet_files]
    return SFTDataConfig(
        train_files=files,
        prompt_key=data.prompt_path,
        response_key=data.response_path,
        max_length=data.max_length,
        truncation=data.truncation,
        apply_chat_template_kwargs=dict(data.apply_chat_template_kwargs),
        multiturn=data.turns if multiturn else SFTMultiturnConfig(),
    )


def select_rows(size: int, max_samples: int, shuffle: bool, seed: Any) -> list[int] | None:
    """Row indices to keep: ``None`` for all; else ``max_samples`` rows, drawn with ``seed`` when ``shuffle``."""
    if max_samples is None or max_samples <= 0 or max_samples >= size:
        return None
    if shuffle:
        rng = np.random.default_rng(None if seed is None else int(seed))
        return sorted(rng.choice(size, size=max_samples, replace=False).tolist())
    return list(range(max_samples))


class SFTDataset(_SFTDataset):
    """Prompt/response rows of parquet files, configured by an older verl ``data`` block (see the module docstring).

    Args:
        parquet_files: one path or a list of paths.
        tokenizer: a tokenizer with a chat template and an eos token.
        config: the ``data`` block (:class:`~verl.utils.dataset.config.SFTDatasetConfig`, DictConfig or dict).
        max_samples: rows to keep (``-1``: all).
    """

    def __init__(self, parquet_files: str | Sequence[str], tokenizer: Any, config: Any, max_samples: int = -1) -> None:
        data = as_config(config, SFTDatasetConfig, "data")
        super().__init__(parquet_files, tokenizer, legacy_data_view(data, parquet_files))
        self.max_samples = max_samples
        keep = select_rows(len(self), max_samples, data.shuffle, data.seed)
        if keep is not None:
            self.prompts = [self.prompts[i] for i in keep]
            self.responses = [self.responses[i] for i in keep]
