"""RLHFDataset: prompts from parquet files, chat-templated and left-padded for generation.

Each parquet row follows verl's row format (``data_source``, ``prompt`` = chat messages, ``ability``,
``reward_model`` = {ground_truth, ...}, ``extra_info``). An item is the templated prompt as fixed-length tensors plus
everything the reward side and the agent loop need (``raw_prompt_ids``, ``raw_prompt``, ``reward_model``, ...).
``data.return_raw_input_ids`` adds ``raw_input_ids``: the ids ``input_ids`` holds, without the padding, as a column
of its own for reward code that re-tokenizes or wants the policy's exact ids.

Prompts longer than ``max_prompt_length`` are either dropped at load time (``filter_overlong_prompts``) or cut when
read (``truncation`` = left | right | middle); ``truncation=error`` refuses them, naming the row, because silently cut
prompts change the task. Files are read with pyarrow and nothing is cached on disk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset

from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.utils.dataset.collate import collate_fn
from verl.utils.dataset.vision_utils import process_image
from verl.utils.shm import maybe_shm_copy
from verl.utils.torch_functional import compute_position_id_with_mask

# collate_fn and process_image are verl's names in this module (defined in collate.py and vision_utils.py); recipes
# also import the DataProto padding helpers from here.
__all__ = ["RLHFDataset", "collate_fn", "pad_dataproto_to_divisor", "process_image", "truncate_ids", "unpad_dataproto"]

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right", "middle")
# Row fields the agent loop reads; they are forwarded as they are when a row carries them.
PASSTHROUGH_EXTRA_INFO_KEYS = ("tools_kwargs", "interaction_kwargs")


def prompt_messages(prompt: str | list[dict]) -> list[dict]:
    """A row's prompt as chat messages: a plain string becomes one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    # pyarrow fills struct fields missing in one message with None; the chat template expects them absent.
    return [{k: v for k, v in message.items() if v is not None} for message in prompt]


def _render(tokenizer: Any, processor: Any, messages: list[dict], template_kwargs: dict) -> str:
    renderer = processor if processor is not None else tokenizer
    return renderer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **template_kwargs)


# Below this many rows per process, starting a process costs more than it saves.
_MIN_ROWS_PER_WORKER = 2000


class _PromptTokenCounter:
    """Picklable: templated token counts of a list of prompts (one tokenizer call for all of them)."""

    def __init__(self, tokenizer: Any, processor: Any, template_kwargs: dict) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        self.template_kwargs = template_kwargs

    def __call__(self, prompts: list[Any]) -> list[int]:
        if not prompts:
            return []
        texts = [_render(self.tokenizer, self.processor, prompt_messages(p), self.template_kwargs) for p in prompts]
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _get(config: Any, key: str, default: Any) -> Any:
    """Read ``key`` from a DataConfig, DictConfig or dict alike; ``None`` config means all defaults."""
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None and default is not None else value


def truncate_ids(ids: list[int], max_length: int, mode: str) -> list[int]:
    """Cut ``ids`` to ``max_length`` tokens: keep the tail (left), the head (right) or both ends (middle)."""
    if len(ids) <= max_length:
        return ids
    if mode == "left":
        return ids[-max_length:]
    if mode == "right":
        return ids[:max_length]
    if mode == "middle":
        head = max_length // 2
        return ids[:head] + ids[len(ids) - (max_length - head) :]
    raise ValueError(f"truncation must be one of {list(TRUNCATION_MODES)}, got {mode!r}")


class RLHFDataset(Dataset):
    """Prompt data set over one or several parquet files (rows concatenated in the order given)."""

    def __init__(
        self,
        data_files: str | os.PathLike | Sequence[str | os.PathLike],
        tokenizer: Any,
        config: Any = None,
        processor: Any = None,
    ) -> None:
        if isinstance(data_files, (str, os.PathLike)):
            data_files = [data_files]
        self.data_files = [os.path.expanduser(str(f)) for f in data_files]
        if not self.data_files:
            raise ValueError("RLHFDataset needs at least one data file (data.train_files / data.val_files)")
        self.tokenizer = tokenizer
        self.processor = processor
        self.config = config

        self.prompt_key: str = _get(config, "prompt_key", "prompt")
        self.max_prompt_length: int = int(_get(config, "max_prompt_length", 1024))
        self.truncation: str = _get(config, "truncation", "error")
        self.filter_overlong_prompts: bool = bool(_get(config, "filter_overlong_prompts", False))
        self.return_raw_chat: bool = bool(_get(config, "return_raw_chat", True))
        self.return_full_prompt: bool = bool(_get(config, "return_full_prompt", False))
        self.return_raw_input_ids: bool = bool(_get(config, "return_raw_input_ids", False))
        self.apply_chat_template_kwargs: dict = dict(_get(config, "apply_chat_template_kwargs", {}) or {})
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"data.truncation must be one of {list(TRUNCATION_MODES)}, got {self.truncation!r}")
        if self.max_prompt_length < 1:
            raise ValueError(f"data.max_prompt_length must be >= 1, got {self.max_prompt_length}")
        pad_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id: int = pad_id if pad_id is not None else tokenizer.eos_token_id

        self._read_files()
        self.num_filtered = 0
        if self.filter_overlong_prompts:
            self._filter_overlong()

    # ----------------------------------------------------------------------------------------------- loading

    def _read_files(self) -> None:
        tables, origins = [], []
        use_shm = bool(_get(self.config, "use_shm", False))
        for file_idx, path in enumerate(self.data_files):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"data file not found: {path}")
            # errors keep naming the user's path; with data.use_shm the bytes come from the shared-memory copy
            table = pq.read_table(maybe_shm_copy(path, use_shm, "data.use_shm"))
            self._check_prompt_column(table, path)
            tables.append(table)
            origins.extend((file_idx, row) for row in range(table.num_rows))
        try:
            self.dataframe: pa.Table = (
                pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise ValueError(
                f"data files have incompatible columns and cannot be concatenated: {self.data_files}: {err}"
            ) from err
        # (file index, row index inside that file) of every kept row, for error messages after filtering.
        self._origins: list[tuple[int, int]] = origins

    def _check_prompt_column(self, table: pa.Table, path: str) -> None:
        if table.num_rows == 0:
            return
        if self.prompt_key not in table.column_names:
            raise KeyError(
                f"row 0 of {path} has no prompt key {self.prompt_key!r} (data.prompt_key); "
                f"columns: {table.column_names}"
            )
        column = table.column(self.prompt_key)
        if column.null_count:
            first_null = next(i for i, value in enumerate(column.is_null().to_pylist()) if value)
            raise KeyError(f"row {first_null} of {path} has no prompt key {self.prompt_key!r} (value is null)")

    def _filter_overlong(self) -> None:
        prompts = self.dataframe.column(self.prompt_key).to_pylist()
        workers = int(_get(self.config, "filter_overlong_prompts_workers", 1) or 1)
        lengths = self._prompt_lengths(prompts, workers)
        keep = [i for i, n in enumerate(lengths) if n <= self.max_prompt_length]
        self.num_filtered = len(self) - len(keep)
        if self.num_filtered:
            self.dataframe = self.dataframe.take(pa.array(keep, type=pa.int64()))
            self._origins = [self._origins[i] for i in keep]
        logger.info(
            "filter_overlong_prompts: dropped %d of %d prompts longer than max_prompt_length=%d (%s)",
            self.num_filtered,
            self.num_filtered + len(keep),
            self.max_prompt_length,
            ", ".join(self.data_files),
        )

    def _prompt_lengths(self, prompts: list[Any], workers: int) -> list[int]:
        """Templated token count of every prompt; ``workers`` > 1 splits the rows over that many processes
        (``data.filter_overlong_prompts_workers``), which pays off on large sets where templating dominates."""
        counter = _PromptTokenCounter(self.tokenizer, self.processor, self.apply_chat_template_kwargs)
        workers = min(workers, max(1, len(prompts) // _MIN_ROWS_PER_WORKER))
        if workers <= 1:
            return counter(prompts)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        size = -(-len(prompts) // workers)
        chunks = [prompts[start : start + size] for start in range(0, len(prompts), size)]
        # fork where the platform has it: no re-import of the caller's main module, no start-up imports
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
            return [n for part in pool.map(counter, chunks) for n in part]

    # ------------------------------------------------------------------------------------------- per row

    def __len__(self) -> int:
        return self.dataframe.num_rows

    def _row(self, index: int) -> dict:
        return self.dataframe.slice(index, 1).to_pylist()[0]

    def _messages(self, row: dict) -> list[dict]:
        return prompt_messages(row[self.prompt_key])

    def _template(self, messages: list[dict]) -> str:
        return _render(self.tokenizer, self.processor, messages, self.apply_chat_template_kwargs)

    def _prompt_ids(self, row: dict) -> list[int]:
        text = self._template(self._messages(row))
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def describe_row(self, index: int) -> str:
        """``"row R of FILE"`` for dataset index ``index`` (the row's position in its own parquet file)."""
        file_idx, row = self._origins[index]
        return f"row {row} of {self.data_files[file_idx]}"

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self._row(index)
        messages = self._messages(row)
        prompt_text = self._template(messages)
        ids = list(self.tokenizer(prompt_text, add_special_tokens=False)["input_ids"])
        if len(ids) > self.max_prompt_length:
            if self.truncation == "error":
                raise ValueError(
                    f"prompt of {self.describe_row(index)} (dataset index {index}) has {len(ids)} tokens, more than "
                    f"data.max_prompt_length={self.max_prompt_length}; set data.truncation=left|right|middle or "
                    f"data.filter_overlong_prompts=true"
                )
            ids = truncate_ids(ids, self.max_prompt_length, self.truncation)

        pad = self.max_prompt_length - len(ids)
        input_ids = torch.tensor([self.pad_token_id] * pad + ids, dtype=torch.long)
        attention_mask = torch.tensor([0] * pad + [1] * len(ids), dtype=torch.long)
        item: dict[str, Any] = {key: value for key, value in row.items() if key != self.prompt_key}
        item.update(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=compute_position_id_with_mask(attention_mask),
            raw_prompt_ids=ids,
        )
        if self.return_raw_chat:
            item["raw_prompt"] = messages
        if self.return_full_prompt:
            item["full_prompts"] = prompt_text
        if self.return_raw_input_ids:
            item["raw_input_ids"] = list(ids)  # a copy: raw_prompt_ids goes to the agent loop, this to reward code
        extra_info = row.get("extra_info") or {}
        item["index"] = extra_info.get("index", index) if isinstance(extra_info, dict) else index
        if isinstance(extra_info, dict):
            for key in PASSTHROUGH_EXTRA_INFO_KEYS:
                if extra_info.get(key) is not None and key not in item:
                    item[key] = extra_info[key]
        return item


def __getattr__(name: str) -> Any:
    # verl defines get_dataset_class here; it lives in factory.py, which imports this module (so: on first use).
    if name == "get_dataset_class":
        from verl.utils.dataset.factory import get_dataset_class

        return get_dataset_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
