"""RMDataset: preference pairs from parquet files, for training a Bradley-Terry reward model.

Each row holds a ``prompt`` and a ``chosen`` and a ``rejected`` response (plain text; column names configurable).
An item is both sequences ``prompt + response (+ EOS)`` right-padded with 0 or cut to ``max_length``:
``input_ids`` and ``attention_mask`` of shape ``(2, max_length)``, chosen first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset

__all__ = ["RMDataset"]


class RMDataset(Dataset):
    """Pairwise preference data over one or several parquet files (rows concatenated in order).

    ``tokenizer`` may be a tokenizer or a model path/hub id (loaded with :func:`verl.utils.hf_tokenizer`).
    ``hdfs://`` files are copied to ``cache_dir`` first. ``max_samples > 0`` keeps that many rows: the first
    ones, or a random choice (``shuffle``, seeded by ``seed``).
    """

    def __init__(
        self,
        parquet_files: str | Sequence[str],
        tokenizer: Any,
        prompt_key: str = "prompt",
        chosen_key: str = "chosen",
        rejected_key: str = "rejected",
        max_length: int = 1024,
        add_eos: bool = True,
        cache_dir: str = "~/.cache/verl/rm",
        max_samples: int = -1,
        shuffle: bool = False,
        seed: int | None = None,
    ) -> None:
        from verl.utils.fs import copy_to_local

        files = [parquet_files] if isinstance(parquet_files, str | os.PathLike) else list(parquet_files)
        if not files:
            raise ValueError("RMDataset needs at least one parquet file")
        if max_length < 1:
            raise ValueError(f"RMDataset: max_length must be >= 1, got {max_length}")
        self.cache_dir = os.path.expanduser(cache_dir)
        self.parquet_files = [copy_to_local(str(f), cache_dir=self.cache_dir) for f in files]
        if isinstance(tokenizer, str):
            from verl.utils.tokenizer import hf_tokenizer

            tokenizer = hf_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.prompt_key, self.chosen_key, self.rejected_key = prompt_key, chosen_key, rejected_key
        self.max_length = max_length
        self.add_eos = add_eos
        self.max_samples, self.shuffle, self.seed = max_samples, shuffle, seed
        self._read_files()

    def _read_files(self) -> None:
        columns = [self.prompt_key, self.chosen_key, self.rejected_key]
        tables = []
        for path in self.parquet_files:
            table = pq.read_table(path)
            missing = [c for c in columns if c not in table.column_names]
            if missing:
                raise KeyError(f"{path}: RMDataset needs columns {missing}; the file has {table.column_names}")
            tables.append(table.select(columns))
        table = pa.concat_tables(tables)
        total = table.num_rows
        if 0 < self.max_samples < total:
            if self.shuffle:
                rng = np.random.default_rng(self.seed)
                picks = np.sort(rng.choice(total, size=self.max_samples, replace=False))
            else:
                picks = np.arange(self.max_samples)
            table = table.take(pa.array(picks))
        self.prompts = table.column(self.prompt_key).to_pylist()
        self.chosen_responses = table.column(self.chosen_key).to_pylist()
        self.rejected_responses = table.column(self.rejected_key).to_pylist()

    def __len__(self) -> int:
        return len(self.prompts)

    def _ids(self, text: str) -> torch.Tensor:
        return torch.as_tensor(self.tokenizer(text)["input_ids"], dtype=torch.long)

    def _fit(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = ids[: self.max_length]
        pad = self.max_length - ids.numel()
        mask = torch.ones_like(ids)
        if pad:
            ids = torch.cat([ids, ids.new_zeros(pad)])
            mask = torch.cat([mask, mask.new_zeros(pad)])
        return ids, mask

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        prompt = self._ids(self.prompts[index])
        eos = torch.tensor([self.tokenizer.eos_token_id], dtype=torch.long) if self.add_eos else prompt[:0]
        pairs = [
            self._fit(torch.cat([prompt, self._ids(response), eos]))
            for response in (self.chosen_responses[index], self.rejected_responses[index])
        ]
        return {"input_ids": torch.stack([p[0] for p in pairs]), "attention_mask": torch.stack([p[1] for p in pairs])}
