"""RLHFDataset: prompts from parquet files, chat-templated and left-padded for generation.

Each parquet row follows verl's row format (``data_source``, ``prompt`` = chat messages, ``ability``,
``reward_model`` = {ground_truth, ...}, ``extra_info``). An item is the templated prompt as fixed-length tensors plus
everything the reward side and the agent loop need (``raw_prompt_ids``, ``raw_prompt``, ``reward_model``, ...).
``data.return_raw_input_ids`` adds ``raw_input_ids``: the ids ``input_ids`` holds, without the padding, as a column
of its own for reward code that re-tokenizes or wants the policy's exact ids.

Prompts longer than ``max_prompt_length`` are either dropped at load time (``filter_overlong_prompts``) or cut when
read (``truncation`` = left | right | middle); ``truncation=error`` refuses them, naming the row, because silently cut
prompts change the task.

The class keeps verl's subclass API: ``__init__`` copies remote files (``_download``) and then calls
``_read_files_and_tokenize``, which reads the files with pyarrow into ``self.dataframe`` (an in-memory
``datasets.Dataset``, as in verl, so subclasses index, ``select`` and ``filter`` it as they do there; nothing is
cached on disk), keeps ``max_samples`` rows and runs ``maybe_filter_out_long_prompts``. Every item's messages come
from ``_build_messages``, so an override of any of these takes effect. Rows with images, videos or audio are refused
by the methods that would handle them (:mod:`verl.utils.dataset.rl_media`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import Dataset

from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.utils.config_builder import as_config
from verl.utils.dataset.collate import collate_fn
from verl.utils.dataset.config import TRUNCATION_MODES, DataConfig
from verl.utils.dataset.rl_files import read_data_file, sample_row_indices
from verl.utils.dataset.rl_media import extract_audio, media_types, multi_modal_refusal
from verl.utils.dataset.vision_utils import process_image
from verl.utils.torch_functional import compute_position_id_with_mask

if TYPE_CHECKING:
    import datasets

# collate_fn and process_image are verl's names in this module (defined in collate.py and vision_utils.py); recipes
# also import the DataProto padding helpers from here.
__all__ = ["RLHFDataset", "collate_fn", "pad_dataproto_to_divisor", "process_image", "truncate_ids", "unpad_dataproto"]

logger = logging.getLogger(__name__)

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
    """Picklable: templated token counts of a list of chat conversations (one tokenizer call for all of them)."""

    def __init__(self, tokenizer: Any, processor: Any, template_kwargs: dict) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        self.template_kwargs = template_kwargs

    def __call__(self, conversations: list[list[dict]]) -> list[int]:
        if not conversations:
            return []
        texts = [_render(self.tokenizer, self.processor, messages, self.template_kwargs) for messages in conversations]
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _has_items(value: Any) -> bool:
    """Whether a row's media column holds anything (``None`` and empty lists do not)."""
    if value is None:
        return False
    return len(value) > 0 if hasattr(value, "__len__") else True


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
    """Prompt data set over one or several parquet files (rows concatenated in the order given).

    Args:
        data_files: one path or a list of paths (``hdfs://`` paths are copied to ``data.cache_dir`` first).
        tokenizer: renders and counts the prompts.
        config: the ``data`` block (DataConfig, DictConfig or dict; ``None`` means all defaults).
        processor: renders the chat template instead of the tokenizer when given.
        max_samples: rows to keep, ``-1`` (or any value <= 0) for all: the first rows, or with ``data.shuffle`` a
            draw seeded by ``data.seed``, as verl draws them.

    ``data.tool_config_path`` / ``data.function_tool_path`` are recorded but load no tools here (tools come from
    ``rollout.multi_turn``); a subclass that sets ``self.tool_schemas`` gets them rendered into every prompt, in the
    length filter and in the items alike. ``chat_template_func`` and ``filter_prompts`` are recorded as verl records
    them, which does not read them either.
    """

    # Class defaults of the private state, for subclasses that set verl's attributes themselves instead of calling
    # this __init__ and then call _read_files_and_tokenize or split.
    _sample_seed: int | None = None
    _part: tuple[int, int] | None = None  # a split() part: its rows [start, end) of the whole set
    _origins_of: tuple[Any, list[tuple[int, int]]] | None = None  # (frame, (file index, row in file) per row)
    num_filtered: int = 0

    def __init__(
        self,
        data_files: str | os.PathLike | Sequence[str | os.PathLike],
        tokenizer: Any,
        config: Any = None,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        if isinstance(data_files, (str, os.PathLike)):
            data_files = [data_files]
        files = [os.path.expanduser(str(f)) for f in data_files]
        if not files:
            raise ValueError("RLHFDataset needs at least one data file (data.train_files / data.val_files)")
        self.data_files: list[str] = list(files)  # local paths once _download ran
        self.original_data_files: list[str] = list(files)  # as given, for resume_dataset_state
        self.tokenizer = tokenizer
        self.processor = processor
        self.config = config
        self.max_samples: int = -1 if max_samples is None else int(max_samples)

        # converted once (a DictConfig, dict or None becomes a DataConfig, keeping a recipe's own keys); self.config
        # stays what the caller gave, as in verl
        data = as_config(config, DataConfig, "data")
        self.cache_dir: str = os.path.expanduser(data.cache_dir)
        self.prompt_key: str = data.prompt_key
        self.image_key: str = data.image_key
        self.video_key: str = data.video_key
        self.audio_key: str = data.audio_key
        processor_patch_size = getattr(getattr(processor, "image_processor", None), "patch_size", 14)
        self.image_patch_size: int = data.image_patch_size or processor_patch_size
        self.max_prompt_length: int = data.max_prompt_length
        self.truncation: str = data.truncation
        self.filter_overlong_prompts: bool = data.filter_overlong_prompts
        self.return_raw_chat: bool = data.return_raw_chat
        self.return_full_prompt: bool = data.return_full_prompt
        self.return_raw_input_ids: bool = data.return_raw_input_ids
        self.apply_chat_template_kwargs: dict = dict(data.apply_chat_template_kwargs)
        self.mm_processor_kwargs: dict = dict(data.mm_processor_kwargs)
        self.return_multi_modal_inputs: bool = data.return_multi_modal_inputs
        self.tool_config_path: str | None = data.tool_config_path
        self.function_tool_path: str | None = data.function_tool_path
        self.tool_schemas: list[dict] | None = None
        # processes that template and count prompts for the length filter (data.filter_overlong_prompts_workers)
        self.num_workers: int = data.filter_overlong_prompts_workers
        self.use_shm: bool = data.use_shm
        self.chat_template_func = data.chat_template_func
        self.need_tools_kwargs: bool = data.need_tools_kwargs
        self.filter_prompts: bool = data.filter_prompts
        # False: pickles leave the rows out and the unpickled copy reads them again from original_data_files
        self.serialize_dataset: bool = False
        self.shuffle: bool = data.shuffle
        self.seed: int | None = data.seed
        pad_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id: int = pad_id if pad_id is not None else tokenizer.eos_token_id

        # Without a seed verl draws max_samples rows from fresh entropy; drawing it once here makes a re-read
        # (resume_dataset_state, unpickling) keep the very same rows.
        self._sample_seed = self.seed if self.seed is not None else int(cast(int, np.random.SeedSequence().entropy))

        self._download()
        self._read_files_and_tokenize()

    # ----------------------------------------------------------------------------------------------- loading

    def _download(self, use_origin_parquet: bool = False) -> None:
        """Point ``data_files`` at local files: ``hdfs://`` files are copied into ``cache_dir`` (once per source),
        local ones stay as they are. ``use_origin_parquet`` starts again from ``original_data_files``."""
        from verl.utils.fs import copy_local_path_from_hdfs
        from verl.utils.hdfs_io import is_non_local

        sources = self.original_data_files if use_origin_parquet else self.data_files
        self.data_files = [
            copy_local_path_from_hdfs(src, cache_dir=self.cache_dir) if is_non_local(src) else src for src in sources
        ]

    def _read_files_and_tokenize(self) -> None:
        """Read ``data_files`` into ``self.dataframe``, keep ``max_samples`` rows, then drop overlong prompts with
        :meth:`maybe_filter_out_long_prompts`. ``data.use_shm`` reads the files from shared-memory copies."""
        from datasets import Dataset as RowTable
        from datasets.table import InMemoryTable

        tables: list[pa.Table] = []
        origins: list[tuple[int, int]] = []
        for file_idx, path in enumerate(self.data_files):
            table = read_data_file(path, self.use_shm)
            self._check_prompt_column(table, path)
            tables.append(table)
            origins.extend((file_idx, row) for row in range(table.num_rows))
        try:
            table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise ValueError(
                f"data files have incompatible columns and cannot be concatenated: {self.data_files}: {err}"
            ) from err
        dataframe = RowTable(InMemoryTable(table))
        self._origins_of = (dataframe, origins)  # for error messages naming the file and row
        seed = self._sample_seed if self._sample_seed is not None else getattr(self, "seed", None)
        picks = sample_row_indices(len(dataframe), self.max_samples, self.shuffle, seed)
        if picks is not None:
            dataframe = self._select_rows(dataframe, picks)
            logger.info("max_samples: kept %d of %d rows (shuffle=%s)", len(picks), table.num_rows, self.shuffle)
        self.dataframe: datasets.Dataset = dataframe
        self.num_filtered = 0
        self.dataframe = self.maybe_filter_out_long_prompts(self.dataframe)

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

    def _tracked_origins(self, dataframe: Any) -> list[tuple[int, int]] | None:
        tracked = self._origins_of
        return tracked[1] if tracked is not None and tracked[0] is dataframe else None

    def _select_rows(self, dataframe: Any, indices: Sequence[int]) -> Any:
        """``dataframe.select(indices)``; the row origins follow when ``dataframe`` is the tracked frame."""
        origins = self._tracked_origins(dataframe)
        selected = dataframe.select(indices)
        if origins is not None:
            self._origins_of = (selected, [origins[i] for i in indices])
        return selected

    def maybe_filter_out_long_prompts(self, dataframe: datasets.Dataset | None = None) -> datasets.Dataset:
        """``dataframe`` (default ``self.dataframe``) without the rows whose templated prompt (messages from
        :meth:`_build_messages`) is longer than ``max_prompt_length``, when ``data.filter_overlong_prompts`` is on;
        the same frame otherwise. Sets ``num_filtered``."""
        if dataframe is None:
            dataframe = self.dataframe
        if not self.filter_overlong_prompts:
            return dataframe
        if type(self)._build_messages is RLHFDataset._build_messages:
            # the default reads only the prompt and the media columns; skip decoding the rest of every row
            needed = [self.prompt_key, self.image_key, self.video_key, self.audio_key]
            rows = dataframe.select_columns([c for c in needed if c in dataframe.column_names]).to_list()
        else:
            rows = dataframe.to_list()
        conversations = [self._build_messages(row, key=self.prompt_key) for row in rows]
        lengths = self._prompt_lengths(conversations, self.num_workers)
        keep = [i for i, n in enumerate(lengths) if n <= self.max_prompt_length]
        self.num_filtered = len(lengths) - len(keep)
        logger.info(
            "filter_overlong_prompts: dropped %d of %d prompts longer than max_prompt_length=%d (%s)",
            self.num_filtered,
            len(lengths),
            self.max_prompt_length,
            ", ".join(self.data_files),
        )
        return self._select_rows(dataframe, keep) if self.num_filtered else dataframe

    def _prompt_lengths(self, conversations: list[list[dict]], workers: int) -> list[int]:
        """Templated token count of every conversation; ``workers`` > 1 splits them over that many processes
        (``data.filter_overlong_prompts_workers``), which pays off on large sets where templating dominates."""
        counter = _PromptTokenCounter(self.tokenizer, self.processor, self._template_kwargs())
        workers = min(workers, max(1, len(conversations) // _MIN_ROWS_PER_WORKER))
        if workers <= 1:
            return counter(conversations)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        size = -(-len(conversations) // workers)
        chunks = [conversations[start : start + size] for start in range(0, len(conversations), size)]
        # fork where the platform has it: no re-import of the caller's main module, no start-up imports
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
            return [n for part in pool.map(counter, chunks) for n in part]

    # ------------------------------------------------------------------------------ resume, pickling, split

    def resume_dataset_state(self) -> None:
        """Read the rows again from ``original_data_files`` (a split() part keeps its own rows). A pickle of an
        older verl without ``original_data_files`` carries its rows; those stay as they are."""
        self.serialize_dataset = not hasattr(self, "original_data_files")
        if self.serialize_dataset:
            logger.warning(
                "RLHFDataset.resume_dataset_state: this data set was saved with its rows by an older verl and has "
                "no original_data_files to read them again from; using the saved rows"
            )
            return
        self._download(use_origin_parquet=True)
        self._read_files_and_tokenize()
        if self._part is not None:
            self.dataframe = self._select_rows(self.dataframe, range(*self._part))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if not self.serialize_dataset:  # as in verl: the rows stay out of pickles and checkpoints
            state.pop("dataframe", None)
            state["_origins_of"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "dataframe" not in state:
            self.resume_dataset_state()

    def split(self, num_splits: int) -> list[RLHFDataset]:
        """``num_splits`` data sets of equal size over consecutive rows of this one (the remainder of
        ``len(self) / num_splits`` rows is dropped, with a warning); each part keeps this one's settings."""
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits <= 0:
            raise ValueError(f"num_splits must be a positive integer, got {num_splits!r}")
        total = len(self)
        if total == 0:
            raise ValueError(f"cannot split an empty data set ({', '.join(self.data_files)})")
        dropped = total % num_splits
        if dropped:
            logger.warning("RLHFDataset.split: dropping the last %d of %d rows", dropped, total)
        size = total // num_splits
        return [self._part_of(i * size, (i + 1) * size) for i in range(num_splits)]

    def _part_of(self, start: int, end: int) -> RLHFDataset:
        part = type(self).__new__(type(self))  # no re-read: the part shares this set's rows and settings
        part.__dict__.update(
            {key: value.copy() if isinstance(value, (list, dict)) else value for key, value in self.__dict__.items()}
        )
        part.dataframe = self.dataframe.select(range(start, end))
        origins = self._tracked_origins(self.dataframe)
        part._origins_of = (part.dataframe, origins[start:end]) if origins is not None else None
        offset = self._part[0] if self._part is not None else 0
        part._part = (offset + start, offset + end)
        return part

    # ------------------------------------------------------------------------------------------- per row

    def __len__(self) -> int:
        return len(self.dataframe)

    def _row(self, index: int) -> dict:
        return self.dataframe[int(index)]

    def _build_messages(self, example: dict, key: str | None = None) -> list[dict]:
        """The chat messages of row ``example`` (its ``key`` column, default ``prompt_key``): a string becomes one
        user message. Rows with images, videos or audio are refused (this build renders text only)."""
        key = self.prompt_key if key is None else key
        media = [
            column for column in (self.image_key, self.video_key, self.audio_key) if _has_items(example.get(column))
        ]
        if media:
            raise multi_modal_refusal("_build_messages", f"the row carries media in its {media} column(s)")
        return prompt_messages(example[key])

    def _template_kwargs(self) -> dict:
        kwargs = dict(self.apply_chat_template_kwargs)
        if self.tool_schemas is not None:
            kwargs["tools"] = self.tool_schemas
        return kwargs

    def _template(self, messages: list[dict]) -> str:
        return _render(self.tokenizer, self.processor, messages, self._template_kwargs())

    def describe_row(self, index: int) -> str:
        """``"row R of FILE"`` for dataset index ``index`` (the row's position in its own parquet file); once a
        subclass replaced the rows, ``"dataset index I of FILES"``."""
        tracked = self._origins_of
        if tracked is not None and tracked[0] is self.dataframe:
            file_idx, row = tracked[1][index]
            return f"row {row} of {self.data_files[file_idx]}"
        return f"dataset index {index} of {', '.join(self.data_files)}"

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self._row(index)
        messages = self._build_messages(row, key=self.prompt_key)
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
        self._warn_missing_tools_kwargs(row, extra_info, index)
        return item

    def _warn_missing_tools_kwargs(self, row: dict, extra_info: Any, index: int) -> None:
        """verl's ``need_tools_kwargs`` check: a row that asks for tools (``extra_info.need_tools_kwargs``, default
        ``data.need_tools_kwargs``) but carries no ``tools_kwargs`` gets its tools created without arguments."""
        extra = extra_info if isinstance(extra_info, dict) else {}
        needed = extra.get("need_tools_kwargs")
        if (self.need_tools_kwargs if needed is None else needed) and not extra.get("tools_kwargs"):
            logger.warning(
                "%s (data source %s) needs tools_kwargs but its extra_info has none",
                self.describe_row(index),
                row.get("data_source"),
            )

    # ------------------------------------------------------------------------------------------ multi-modal

    @classmethod
    def _extract_audio_info(cls, messages: list[dict]) -> list[Any] | None:
        """The audio payloads of the structured audio items of ``messages`` (``None`` when there are none)."""
        return extract_audio(messages)

    @classmethod
    def _process_multi_modal_info(
        cls, messages: list[dict], image_patch_size: int = 14, config: Any = None
    ) -> tuple[None, None, None]:
        """``(images, videos, audios)`` of ``messages``: ``(None, None, None)`` for text messages, which is all this
        build renders; messages with media items are refused."""
        found = media_types(messages)
        if found:
            raise multi_modal_refusal("_process_multi_modal_info", f"the messages carry {found} items")
        return None, None, None

    @classmethod
    async def process_multi_modal_info(
        cls, messages: list[dict], image_patch_size: int = 14, config: Any = None
    ) -> tuple[None, None, None]:
        """:meth:`_process_multi_modal_info` off the event loop (an override may decode media); the agent loop calls
        it for every prompt when a processor is set."""
        return await asyncio.to_thread(cls._process_multi_modal_info, messages, image_patch_size, config)

    @classmethod
    async def process_vision_info(
        cls, messages: list[dict], image_patch_size: int = 14, config: Any = None
    ) -> tuple[None, None]:
        """``(images, videos)`` of ``messages``: ``(None, None)`` for text messages; image and video items are
        refused (this build renders text only)."""
        found = media_types(messages, ("image", "video"))
        if found:
            raise multi_modal_refusal("process_vision_info", f"the messages carry {found} items")
        return None, None


def __getattr__(name: str) -> Any:
    # verl defines get_dataset_class here; it lives in factory.py, which imports this module (so: on first use).
    if name == "get_dataset_class":
        from verl.utils.dataset.factory import get_dataset_class

        return get_dataset_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
