"""verl's ``MultiTurnSFTDataset`` over this package's multi-turn SFT tokenization.

Each parquet row is one conversation (``messages_key``; optional ``tools_key`` and ``enable_thinking_key`` columns).
It is tokenized the way the tool agent loop builds a trajectory (:func:`verl.utils.dataset.sft_parquet.
tokenize_conversation`), so SFT and RL see the same token ids, and only assistant turns get ``loss_mask`` 1.

``pad_mode``: ``right`` (default) pads to ``max_length`` (items: ``input_ids``, ``attention_mask``,
``position_ids``, ``loss_mask``); ``no_padding`` returns each conversation at its own length, cut to ``max_length``
(items: ``input_ids``, ``position_ids``, ``loss_mask``). Images and videos (verl's ``processor``) are not part of
this build's SFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from verl.utils.config_builder import as_config
from verl.utils.dataset.config import SFT_PAD_MODES, SFTDatasetConfig
from verl.utils.dataset.sft_dataset import legacy_data_view, select_rows
from verl.utils.dataset.sft_parquet import SFTDataset as _SFTDataset
from verl.utils.extras import MissingExtraError, missing_message

__all__ = ["MultiTurnSFTDataset"]

PAD_MODES = SFT_PAD_MODES


class MultiTurnSFTDataset(_SFTDataset):
    """Conversations of parquet files, configured by verl's ``data`` block (see the module docstring).

    Args:
        parquet_files: one path or a list of paths.
        tokenizer: a tokenizer whose chat template can be rendered turn by turn.
        config: the ``data`` block (:class:`~verl.utils.dataset.config.SFTDatasetConfig`, a DictConfig or a dict:
            ``messages_key``/``tools_key``/``enable_thinking_key`` directly or under ``multiturn``; ``max_length``,
            ``truncation``, ``pad_mode``, ``apply_chat_template_kwargs``, ``shuffle``, ``seed``).
        processor: multimodal processor; must be ``None`` here.
        max_samples: conversations to keep (``-1``: all).
    """

    def __init__(
        self,
        parquet_files: str | Sequence[str],
        tokenizer: Any,
        config: Any,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        if processor is not None:
            raise MissingExtraError(
                missing_message(
                    "verl.utils.dataset.multiturn_sft_dataset.MultiTurnSFTDataset",
                    "images/videos in SFT conversations",
                    reason="this package's SFT trainer is text-only; pass processor=None",
                )
            )
        data = as_config(config, SFTDatasetConfig, "data")
        self.pad_mode = data.pad_mode
        super().__init__(parquet_files, tokenizer, legacy_data_view(data, parquet_files, multiturn=True))
        self.processor = None
        self.max_samples = max_samples
        keep = select_rows(len(self), max_samples, data.shuffle, data.seed)
        if keep is not None:
            for name in ("messages", "tools", "enable_thinking", "rows"):
                values = getattr(self, name)
                setattr(self, name, [values[i] for i in keep])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.pad_mode == "right":
            return super().__getitem__(index)
        ids, loss_mask = self.tokenize_messages(index)
        ids, loss_mask = ids[: self.max_length], loss_mask[: self.max_length]
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "position_ids": torch.arange(len(ids), dtype=torch.long),
            "loss_mask": torch.tensor(loss_mask, dtype=torch.long),
        }
