"""SFTDataset: parquet rows -> fixed-length token sequences with a loss mask on the response.

Each row gives a prompt (chat messages, or a plain string sent as one user message) and a response string. The
prompt is rendered with the tokenizer's chat template and ``add_generation_prompt=True`` -- the exact prefix the
rollout engine feeds the policy later -- and the response plus ``eos`` follows it. Training on that layout means the
RL trainer starts from a model that already answers in the format its prompts use.

``loss_mask[t] == 1`` iff token ``t`` is a response token (the eos included); the trainer predicts token ``t`` from
position ``t - 1``, so it shifts the mask by one. Sequences are right-padded to ``max_length``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl.trainer.sft.config import TRUNCATION_MODES
from verl.utils.torch_functional import compute_position_id_with_mask

__all__ = ["SFTDataError", "SFTDataset", "read_prompt_response_columns"]


class SFTDataError(ValueError):
    """A data problem the user must fix (missing column, wrong row type, too long a row); names file/row/key."""


def _read_column(path: str, table: Any, dotted_key: str, config_key: str) -> list[Any]:
    """Values of ``dotted_key`` (``col`` or ``col.field.sub``) for every row of ``table``, read from ``path``."""
    top, *rest = dotted_key.split(".")
    if top not in table.column_names:
        raise SFTDataError(
            f"{config_key}={dotted_key!r}: parquet file {path} has no column {top!r}; "
            f"its columns are {table.column_names}"
        )
    values = table.column(top).to_pylist()
    if not rest:
        return values
    out = []
    for row, value in enumerate(values):
        for depth, name in enumerate(rest):
            if not isinstance(value, dict) or name not in value:
                where = ".".join([top, *rest[:depth]])
                found = sorted(value) if isinstance(value, dict) else type(value).__name__
                raise SFTDataError(
                    f"{config_key}={dotted_key!r}: row {row} of {path} has no field {name!r} under {where!r} "
                    f"(found {found})"
                )
            value = value[name]
        out.append(value)
    return out


def read_prompt_response_columns(
    files: Sequence[str], prompt_key: str, response_key: str, files_key: str = "data.train_files"
) -> tuple[list[Any], list[Any]]:
    """Read the prompt and response values of every row of every parquet file, in file order."""
    import pyarrow.parquet as pq

    if not files:
        raise ValueError(f"{files_key} is empty: give at least one parquet file")
    prompts: list[Any] = []
    responses: list[Any] = []
    for raw in files:
        path = os.path.expanduser(str(raw))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{files_key}: parquet file {path} does not exist")
        table = pq.read_table(path)
        prompts += _read_column(path, table, prompt_key, "data.prompt_key")
        responses += _read_column(path, table, response_key, "data.response_key")
    if not prompts:
        raise SFTDataError(f"{files_key}: the parquet file(s) {list(files)} hold no rows")
    return prompts, responses


def _as_messages(prompt: Any, row: int, prompt_key: str) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Sequence) and prompt and all(isinstance(m, dict) and "role" in m for m in prompt):
        return list(prompt)
    raise SFTDataError(
        f"data.prompt_key={prompt_key!r}: row {row} holds {type(prompt).__name__} {prompt!r:.80}; expected a string "
        "or a non-empty list of chat messages ({'role': ..., 'content': ...})"
    )


def _as_text(response: Any, row: int, response_key: str) -> str:
    if isinstance(response, str):
        return response
    if isinstance(response, int | float) and not isinstance(response, bool):
        return str(response)
    raise SFTDataError(
        f"data.response_key={response_key!r}: row {row} holds {type(response).__name__} {response!r:.80}; "
        "expected a string"
    )


class SFTDataset(Dataset):
    """Prompt/response pairs from parquet, tokenized on access.

    ``config`` is an :class:`~verl.trainer.sft.config.SFTDataConfig` (or anything with ``prompt_key``,
    ``response_key``, ``max_length`` and ``truncation`` attributes). Items are dicts of 1-D tensors of length
    ``max_length``: ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask``.
    """

    def __init__(
        self, parquet_files: str | Sequence[str], tokenizer: Any, config: Any, files_key: str = "data.train_files"
    ) -> None:
        files = [parquet_files] if isinstance(parquet_files, str | os.PathLike) else list(parquet_files)
        self.tokenizer = tokenizer
        self.prompt_key = config.prompt_key
        self.response_key = config.response_key
        self.max_length = int(config.max_length)
        self.truncation = config.truncation
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"data.truncation must be one of {list(TRUNCATION_MODES)}, got {self.truncation!r}")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token; SFT appends eos to every response so the model learns "
                             "to stop")
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.prompts, self.responses = read_prompt_response_columns(files, self.prompt_key, self.response_key,
                                                                    files_key)

    def __len__(self) -> int:
        return len(self.prompts)

    def tokenize(self, index: int) -> tuple[list[int], list[int]]:
        """Token ids of row ``index``: (prompt with the generation prompt, response + eos), before padding."""
        messages = _as_messages(self.prompts[index], index, self.prompt_key)
        response = _as_text(self.responses[index], index, self.response_key)
        prompt_text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = self.tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        response_ids = self.tokenizer(response, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return list(prompt_ids), list(response_ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        prompt_ids, response_ids = self.tokenize(index)
        ids = prompt_ids + response_ids
        is_response = [0] * len(prompt_ids) + [1] * len(response_ids)
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise SFTDataError(
                    f"row {index}: prompt ({len(prompt_ids)} tokens) + response ({len(response_ids)} tokens) is longer "
                    f"than data.max_length={self.max_length}; raise max_length or set data.truncation=left|right"
                )
            keep = slice(-self.max_length, None) if self.truncation == "left" else slice(0, self.max_length)
            ids, is_response = ids[keep], is_response[keep]
        pad = self.max_length - len(ids)
        input_ids = torch.tensor(ids + [self.pad_token_id] * pad, dtype=torch.long)
        attention_mask = torch.tensor([1] * len(ids) + [0] * pad, dtype=torch.long)
        loss_mask = torch.tensor(is_response + [0] * pad, dtype=torch.long)
        position_ids = compute_position_id_with_mask(attention_mask.unsqueeze(0)).squeeze(0)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "loss_mask": loss_mask,
        }
