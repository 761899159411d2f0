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

import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from verl.utils.dataset.sft_parquet import SFTDataset as _SFTDataset

__all__ = ["SFTDataset", "legacy_data_view", "read_key", "select_rows"]


def read_key(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a DictConfig, dict or attribute config; ``default`` when missing or null."""
    if config is None:
        return default
    value = (
        config.get(key, default)
        if isinstance(config, Mapping) or hasattr(config, "get")
        else getattr(config, key, default)
    )
    return default if value is None else value


def _column_path(config: Any, column_key: str, fields_key: str, default: str) -> str:
    """``prompt_key=extra_info`` + ``prompt_dict_keys=[question]`` -> ``extra_info.question``."""
    column = read_key(config, column_key, default)
    if isinstance(column, Sequence) and not isinstance(column, str):
        column = list(column)
        if len(column) != 1:
            raise ValueError(f"data.{column_key}={column}: name exactly one column")
        column = column[0]
    fields = read_key(config, fields_key, None) or []
    fields = [fields] if isinstance(fields, str) else list(fields)
    return ".".join([str(column), *map(str, fields)])


def legacy_data_view(config: Any, multiturn: bool = False) -> types.SimpleNamespace:
    """The attributes :class:`verl.utils.dataset.sft_parquet.SFTDataset` reads, from an older verl ``data`` config.

    Multi-turn keys are read from ``data.multiturn.*`` (verl 0.4-0.5) or from ``data.*`` itself (later releases).
    """
    turn_cfg = read_key(config, "multiturn", None) or config
    view = types.SimpleNamespace(
        prompt_key=_column_path(config, "prompt_key", "prompt_dict_keys", "prompt"),
        response_key=_column_path(config, "response_key", "response_dict_keys", "response"),
        max_length=int(read_key(config, "max_length", 1024)),
        truncation=str(read_key(config, "truncation", "error")),
        apply_chat_template_kwargs=dict(read_key(config, "apply_chat_template_kwargs", {}) or {}),
        multiturn=None,
    )
    if multiturn:
        view.multiturn = types.SimpleNamespace(
            enable=True,
            messages_key=str(read_key(turn_cfg, "messages_key", "messages")),
            tools_key=str(read_key(turn_cfg, "tools_key", "tools")),
            enable_thinking_key=read_key(turn_cfg, "enable_thinking_key", "enable_thinking"),
            enable_thinking_default=read_key(turn_cfg, "enable_thinking_default", None),
        )
    return view


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
        config: the ``data`` block (DictConfig or dict).
        max_samples: rows to keep (``-1``: all).
    """

    def __init__(self, parquet_files: str | Sequence[str], tokenizer: Any, config: Any, max_samples: int = -1) -> None:
        super().__init__(parquet_files, tokenizer, legacy_data_view(config))
        self.max_samples = max_samples
        keep = select_rows(len(self), max_samples, bool(read_key(config, "shuffle", False)), read_key(config, "seed"))
        if keep is not None:
            self.prompts = [self.prompts[i] for i in keep]
            self.responses = [self.responses[i] for i in keep]
