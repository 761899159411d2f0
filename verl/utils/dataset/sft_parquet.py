"""SFTDataset: parquet rows -> fixed-length token sequences with a loss mask on what the model should produce.

Single-response mode (default). Each row gives a prompt (chat messages, or a plain string sent as one user message)
and a response string. The prompt is rendered with the tokenizer's chat template and ``add_generation_prompt=True``
-- the exact prefix the rollout engine feeds the policy later -- and the response plus ``eos`` follows it. Training on
that layout means the RL trainer starts from a model that already answers in the format its prompts use.

Multi-turn mode (``data.multiturn.enable``). Each row is one conversation (system/user/assistant/tool messages), and
it is tokenized the way ``ToolAgentLoop`` builds a trajectory, so SFT and RL see the same token ids:

* the messages before the first assistant turn (with the row's tool schemas) rendered with the generation prompt;
* each assistant turn: what the template adds for that message after the generation prompt, up to and including
  ``eos`` (the model stops there; anything the template prints after ``eos`` never appears at RL time);
* each run of tool/user messages between assistant turns: rendered on its own with the generation prompt, the
  template's fixed prefix (the render of ``[{}]``) cut off -- the loop's incremental rendering.

Only the assistant turns get ``loss_mask`` 1: training on tool answers would teach the model to guess the tool's
output instead of reading it. Messages after the last assistant turn add nothing to learn and are dropped.

``loss_mask[t] == 1`` iff token ``t`` is produced by the model (its eos included); the trainer predicts token ``t``
from position ``t - 1``, so it shifts the mask by one. Sequences are right-padded to ``max_length``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl.utils.dataset.config import SFT_TRUNCATION_MODES, SFTDataConfig, SFTMultiturnConfig
from verl.utils.torch_functional import compute_position_id_with_mask

__all__ = [
    "MESSAGE_ROLES",
    "TRUNCATION_MODES",
    "SFTDataError",
    "SFTDataset",
    "read_prompt_response_columns",
    "tokenize_conversation",
]

MESSAGE_ROLES = ("system", "user", "assistant", "tool")
TRUNCATION_MODES = SFT_TRUNCATION_MODES  # data.truncation: fail, keep the tail, keep the head


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


def _optional_column(path: str, table: Any, key: str | None, config_key: str, rows: int) -> list[Any]:
    """Values of ``key`` when the file has that column, else ``None`` for every row."""
    if key and key.split(".")[0] in table.column_names:
        return _read_column(path, table, key, config_key)
    return [None] * rows


def _read_conversations(
    files: Sequence[str], multiturn: SFTMultiturnConfig, files_key: str
) -> tuple[list[Any], list[Any], list[Any], list[tuple[str, int]]]:
    """Messages, tools and enable_thinking flags (``None`` where the file lacks the optional column) of every row,
    with (file, row)."""
    import pyarrow.parquet as pq

    if not files:
        raise ValueError(f"{files_key} is empty: give at least one parquet file")
    thinking_key = multiturn.enable_thinking_key
    messages: list[Any] = []
    tools: list[Any] = []
    thinking: list[Any] = []
    where: list[tuple[str, int]] = []
    for raw in files:
        path = os.path.expanduser(str(raw))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{files_key}: parquet file {path} does not exist")
        table = pq.read_table(path)
        rows = _read_column(path, table, multiturn.messages_key, "data.multiturn.messages_key")
        messages += rows
        tools += _optional_column(path, table, multiturn.tools_key, "data.multiturn.tools_key", len(rows))
        thinking += _optional_column(path, table, thinking_key, "data.multiturn.enable_thinking_key", len(rows))
        where += [(path, row) for row in range(len(rows))]
    if not messages:
        raise SFTDataError(f"{files_key}: the parquet file(s) {list(files)} hold no rows")
    return messages, tools, thinking, where


def _check_messages(value: Any, path: str, row: int, key: str) -> list[dict[str, Any]]:
    """The row's messages as plain dicts (keys whose value is null dropped: parquet structs fill absent fields)."""
    place = f"data.multiturn.messages_key={key!r}: row {row} of {path}"
    if not isinstance(value, list | tuple) or not value:
        raise SFTDataError(
            f"{place} holds {type(value).__name__} {value!r:.80}; expected a non-empty list of chat "
            "messages ({'role': ..., 'content': ...})"
        )
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise SFTDataError(f"{place}: message {index} is {type(message).__name__} {message!r:.60}, not a dict")
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise SFTDataError(f"{place}: message {index} has role {role!r}; expected one of {list(MESSAGE_ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list | tuple):
            raise SFTDataError(
                f"{place}: message {index} ({role}) has content of type {type(content).__name__}; expected a string"
            )
        messages.append({k: v for k, v in message.items() if v is not None or k == "content"})
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise SFTDataError(f"{place} has no assistant message (roles {roles}): there is nothing to learn")
    if roles[0] == "assistant":
        raise SFTDataError(
            f"{place} starts with an assistant message: the prompt (system/user messages before the "
            "first assistant turn) must not be empty"
        )
    return messages


def _check_tools(value: Any, path: str, row: int, key: str) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as err:
            raise SFTDataError(
                f"data.multiturn.tools_key={key!r}: row {row} of {path} is not valid JSON: {err}"
            ) from None
    if value is None or (isinstance(value, list | tuple) and not value):
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(t, dict) for t in value):
        raise SFTDataError(
            f"data.multiturn.tools_key={key!r}: row {row} of {path} holds {value!r:.80}; expected a "
            "list of tool schemas (or its JSON text)"
        )
    return list(value)


def _render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    return [int(t) for t in ids]


def tokenize_conversation(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    chat_kwargs: dict[str, Any] | None = None,
) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of one conversation, laid out as ``ToolAgentLoop`` lays out its trajectory.

    ``chat_kwargs`` go to every chat-template call (``enable_thinking`` and the like). See the module docstring.
    Raises :class:`SFTDataError` when the chat template cannot be split that way (it
    does not render new messages after a fixed prefix, or rewrites earlier turns when an assistant turn is added).
    """
    eos = tokenizer.eos_token_id
    kwargs = dict(chat_kwargs or {})
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    ids = _render(tokenizer, messages[:first], tools=tools or None, add_generation_prompt=True, **kwargs)
    mask = [0] * len(ids)
    prefix = _render(tokenizer, [{}], add_generation_prompt=False, **kwargs)
    index = first
    while index <= last:
        if messages[index]["role"] == "assistant":
            before = _render(tokenizer, messages[:index], tools=tools or None, add_generation_prompt=True, **kwargs)
            after = _render(
                tokenizer, messages[: index + 1], tools=tools or None, add_generation_prompt=False, **kwargs
            )
            if after[: len(before)] != before:
                raise SFTDataError(
                    f"the chat template renders assistant message {index} in a way that changes the tokens before "
                    "it; it cannot be cut into turns as the tool agent loop generates them"
                )
            turn = after[len(before) :]
            turn = turn[: len(turn) - turn[::-1].index(eos)] if eos in turn else [*turn, eos]
            ids += turn
            mask += [1] * len(turn)
            index += 1
            continue
        end = index
        while messages[end]["role"] != "assistant":
            end += 1
        inserted = _render(tokenizer, messages[index:end], add_generation_prompt=True, **kwargs)
        if inserted[: len(prefix)] != prefix:
            raise SFTDataError(
                "the chat template does not render new messages after its fixed prefix (the render of [{}]); "
                "the tool agent loop and multi-turn SFT need a template that can be used incrementally"
            )
        ids += inserted[len(prefix) :]
        mask += [0] * (len(inserted) - len(prefix))
        index = end
    return ids, mask


class SFTDataset(Dataset):
    """Prompt/response pairs (or whole conversations) from parquet, tokenized on access.

    ``config`` is an :class:`~verl.utils.dataset.config.SFTDataConfig` (its ``prompt_key``, ``response_key``,
    ``max_length``, ``truncation``, ``apply_chat_template_kwargs`` and ``multiturn`` are read; the files are the ones
    given). Items are dicts of 1-D tensors of length ``max_length``: ``input_ids``, ``attention_mask``,
    ``position_ids``, ``loss_mask``.
    """

    def __init__(
        self,
        parquet_files: str | Sequence[str],
        tokenizer: Any,
        config: SFTDataConfig,
        files_key: str = "data.train_files",
    ) -> None:
        files = [parquet_files] if isinstance(parquet_files, str | os.PathLike) else list(parquet_files)
        self.tokenizer = tokenizer
        self.prompt_key = config.prompt_key
        self.response_key = config.response_key
        self.max_length = int(config.max_length)
        self.truncation = config.truncation  # one of TRUNCATION_MODES (SFTDataConfig checks it)
        if tokenizer.eos_token_id is None:
            raise ValueError(
                "the tokenizer has no eos token; SFT appends eos to every response so the model learns to stop"
            )
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.chat_kwargs = dict(config.apply_chat_template_kwargs)
        multiturn = config.multiturn
        self.multiturn = multiturn.enable
        if self.multiturn:
            key, tools_key = multiturn.messages_key, multiturn.tools_key
            raw_messages, raw_tools, raw_thinking, where = _read_conversations(files, multiturn, files_key)
            # checked up front: a bad row should stop the run at start-up, not hours into it
            self.messages = [_check_messages(m, path, row, key) for m, (path, row) in zip(raw_messages, where)]
            self.tools = [_check_tools(t, path, row, tools_key) for t, (path, row) in zip(raw_tools, where)]
            default = multiturn.enable_thinking_default
            self.enable_thinking = [default if flag is None else bool(flag) for flag in raw_thinking]
            self.rows = where
        else:
            self.prompts, self.responses = read_prompt_response_columns(
                files, self.prompt_key, self.response_key, files_key
            )

    def __len__(self) -> int:
        return len(self.messages) if self.multiturn else len(self.prompts)

    def tokenize(self, index: int) -> tuple[list[int], list[int]]:
        """Token ids of row ``index``: (prompt with the generation prompt, response + eos), before padding."""
        if self.multiturn:
            raise TypeError(
                "tokenize() is for prompt/response rows; with data.multiturn.enable use tokenize_messages()"
            )
        messages = _as_messages(self.prompts[index], index, self.prompt_key)
        response = _as_text(self.responses[index], index, self.response_key)
        prompt_text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.chat_kwargs
        )
        prompt_ids = self.tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        response_ids = self.tokenizer(response, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return list(prompt_ids), list(response_ids)

    def tokenize_messages(self, index: int) -> tuple[list[int], list[int]]:
        """(token ids, loss mask) of conversation ``index`` before padding (see :func:`tokenize_conversation`)."""
        if not self.multiturn:
            raise TypeError("tokenize_messages() needs data.multiturn.enable=true")
        kwargs = dict(self.chat_kwargs)
        if self.enable_thinking[index] is not None:
            kwargs["enable_thinking"] = self.enable_thinking[index]
        try:
            return tokenize_conversation(self.tokenizer, self.messages[index], self.tools[index], kwargs)
        except SFTDataError as err:
            path, row = self.rows[index]
            raise SFTDataError(f"row {row} of {path}: {err}") from None

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.multiturn:
            ids, is_response = self.tokenize_messages(index)
            n_learned = sum(is_response)
            what = f"conversation ({len(ids)} tokens, {n_learned} of them assistant tokens)"
        else:
            prompt_ids, response_ids = self.tokenize(index)
            ids = prompt_ids + response_ids
            is_response = [0] * len(prompt_ids) + [1] * len(response_ids)
            what = f"prompt ({len(prompt_ids)} tokens) + response ({len(response_ids)} tokens)"
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise SFTDataError(
                    f"row {index}: {what} is longer than data.max_length={self.max_length}; raise max_length or set "
                    "data.truncation=left|right"
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
