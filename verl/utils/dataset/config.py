"""Typed configs of the data sets: the ``data`` group of the PPO trainer (:class:`DataConfig`, read by
:class:`~verl.utils.dataset.rl_dataset.RLHFDataset` and the samplers), the ``data`` group of the SFT trainer
(:class:`SFTDataConfig`) and the ``data`` block verl's SFT data sets read (:class:`SFTDatasetConfig`).

They live here, below the trainers, so the data sets convert the config they are handed once (``as_config``) and read
it by attribute, with every default in the dataclass. The trainers re-export them from their old places
(``verl.trainer.config``, ``verl.trainer.config.data_config``, ``verl.trainer.sft.config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, ConfigError, check

__all__ = [
    "SFT_TRUNCATION_MODES",
    "TRUNCATION_MODES",
    "CustomClsConfig",
    "DataConfig",
    "SFTCustomClsConfig",
    "SFTDataConfig",
    "SFTDatasetConfig",
    "SFTMultiturnConfig",
    "SamplerConfig",
]

# data.truncation of the prompt data set: refuse, keep the tail, keep the head, keep both ends
TRUNCATION_MODES = ("error", "left", "right", "middle")
# data.truncation of the SFT data sets: refuse, keep the tail, keep the head
SFT_TRUNCATION_MODES = ("error", "left", "right")
# data.pad_mode of verl's MultiTurnSFTDataset: pad to max_length, or each conversation at its own length
SFT_PAD_MODES = ("right", "no_padding")


def _as_file_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


# ------------------------------------------------------------------------------------------------ prompt data
@dataclass
class CustomClsConfig(BaseConfig):
    """A user Dataset class: ``path`` to a .py file or module, ``name`` of the class."""

    path: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        check(self.path is None or bool(self.name), "name", "must be set when path is set")


@dataclass
class SamplerConfig(BaseConfig):
    """A user sampler (curriculum): ``class_path`` to a .py file or module, ``class_name`` inside it."""

    class_path: str | None = None
    class_name: str | None = None

    def __post_init__(self) -> None:
        check(self.class_path is None or bool(self.class_name), "class_name", "must be set when class_path is set")


@dataclass
class DataConfig(BaseConfig):
    """Prompt data. ``train_batch_size`` counts prompts per step; ``val_batch_size=None`` validates the whole
    validation set in one batch. ``seed=None`` uses ``trainer.seed``. ``validation_shuffle`` reads the validation
    set in one seeded shuffled order, the same at every validation (file order when false). ``truncation`` decides
    what happens to prompts longer than ``max_prompt_length``: ``error`` refuses them, the others cut from that
    side; ``filter_overlong_prompts`` drops them at load time instead, templating and counting the rows in
    ``filter_overlong_prompts_workers`` processes (worth it from tens of thousands of rows). ``use_shm`` reads the
    files from copies in ``/dev/shm``. ``return_raw_input_ids`` adds a ``raw_input_ids`` column per row: the prompt's
    ids after the chat template (and truncation), without the left padding of ``input_ids``, for reward code that
    decodes and re-templates the prompt for a model with another tokenizer. ``gen_batch_size`` is the prompts of one
    generation batch of dynamic sampling (``algorithm.filter_groups``; default ``train_batch_size``). The keys
    ``inert_keys.py`` lists have no effect here (it says why for each).

    verl's RLHFDataset also reads four keys its YAML does not list: ``cache_dir`` (where ``hdfs://`` files are
    copied), ``need_tools_kwargs`` (warn about a row that asks for tools but carries no ``tools_kwargs``, unless the
    row's ``extra_info`` says otherwise), and ``chat_template_func`` and ``filter_prompts``, which it records and
    never reads. ``image_patch_size=None`` takes the processor's patch size."""

    tokenizer: str | None = None
    use_shm: bool = False
    train_files: str | list[str] = "~/data/rlhf/gsm8k/train.parquet"
    val_files: str | list[str] | None = "~/data/rlhf/gsm8k/test.parquet"
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 1024
    val_batch_size: int | None = None
    return_raw_input_ids: bool = False
    return_raw_chat: bool = True
    return_full_prompt: bool = False
    shuffle: bool = True
    validation_shuffle: bool = False
    seed: int | None = None
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = 1
    truncation: str = "error"
    image_key: str = "images"
    video_key: str = "videos"
    trust_remote_code: bool = False
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    dataloader_num_workers: int = 0
    train_max_samples: int = -1
    val_max_samples: int = -1
    gen_batch_size: int | None = None
    tool_config_path: str | None = None
    function_tool_path: str | None = None
    image_patch_size: int | None = 14
    audio_key: str = "audios"
    return_multi_modal_inputs: bool = True
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    cache_dir: str = "~/.cache/verl/rlhf"
    need_tools_kwargs: bool = False
    chat_template_func: Any = None
    filter_prompts: bool = True

    def __post_init__(self) -> None:
        check(bool(self.train_files), "train_files", "must name at least one parquet file")
        check(self.max_prompt_length >= 1, "max_prompt_length", f"must be >= 1, got {self.max_prompt_length}")
        check(self.max_response_length >= 1, "max_response_length", f"must be >= 1, got {self.max_response_length}")
        check(self.train_batch_size >= 1, "train_batch_size", f"must be >= 1, got {self.train_batch_size}")
        check(
            self.val_batch_size is None or self.val_batch_size >= 1,
            "val_batch_size",
            f"must be >= 1 or null, got {self.val_batch_size}",
        )
        check(
            self.truncation in TRUNCATION_MODES,
            "truncation",
            f"must be one of {list(TRUNCATION_MODES)}, got {self.truncation!r}",
        )
        check(
            self.filter_overlong_prompts_workers >= 1,
            "filter_overlong_prompts_workers",
            f"must be >= 1, got {self.filter_overlong_prompts_workers}",
        )
        check(
            self.dataloader_num_workers >= 0,
            "dataloader_num_workers",
            f"must be >= 0, got {self.dataloader_num_workers}",
        )

    @property
    def train_file_list(self) -> list[str]:
        return [self.train_files] if isinstance(self.train_files, str) else list(self.train_files)

    @property
    def val_file_list(self) -> list[str]:
        if self.val_files is None:
            return []
        return [self.val_files] if isinstance(self.val_files, str) else list(self.val_files)


# --------------------------------------------------------------------------------------------------- SFT data
@dataclass
class SFTMultiturnConfig(BaseConfig):
    """Whole conversations per row (``data.multiturn.enable=true``) instead of one prompt and one response.

    ``messages_key`` names a column holding a list of chat messages (system/user/assistant/tool); the loss covers
    only what the assistant turns produce. ``tools_key`` names an optional column of tool schemas (a list, or its
    JSON text) passed to the chat template with the prompt, as the tool agent loop does; rows of a file without that
    column have no tools. ``enable_thinking_key`` names an optional boolean column passed to the chat template as
    ``enable_thinking`` (Qwen3-style templates); rows without a value use ``enable_thinking_default`` (null: the
    template's own default).
    """

    enable: bool = False
    messages_key: str = "messages"
    tools_key: str = "tools"
    enable_thinking_key: str | None = "enable_thinking"
    enable_thinking_default: bool | None = None

    def __post_init__(self) -> None:
        check(bool(self.messages_key), "messages_key", "must name a column")


@dataclass
class SFTCustomClsConfig(BaseConfig):
    """A user dataset class (``path`` to a .py file or module, ``name`` of the class) instead of :class:`SFTDataset`.

    It is built as ``cls(parquet_files=..., tokenizer=..., config=<data group as DictConfig>)`` (plus
    ``max_samples=`` when its signature takes it) and its items must be what SFTDataset yields: ``input_ids``,
    ``attention_mask``, ``position_ids`` and ``loss_mask`` of length ``max_length``.
    """

    path: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        check(not self.path or bool(self.name), "name", "must name the dataset class defined in custom_cls.path")


@dataclass
class SFTDataConfig(BaseConfig):
    """Where the examples come from and how they become token sequences.

    ``prompt_key`` names a column holding chat messages (or a plain string, sent as one user message).
    ``response_key`` is a column name or a dotted path into a struct column (``reward_model.ground_truth``).
    With ``multiturn.enable`` both are ignored: each row is one conversation (:class:`SFTMultiturnConfig`).
    ``train_batch_size`` is global (all ranks); each optimizer step accumulates gradients over micro-batches of
    ``micro_batch_size_per_gpu`` rows per rank. ``train_max_samples``/``val_max_samples`` > 0 keep only the first
    that many rows. ``apply_chat_template_kwargs`` are passed to every chat-template call (e.g. ``enable_thinking``).
    """

    train_files: str | list[str] | None = None
    val_files: str | list[str] | None = None
    prompt_key: str = "prompt"
    response_key: str = "reward_model.ground_truth"
    max_length: int = 1024
    truncation: str = "error"
    train_batch_size: int = 32
    micro_batch_size_per_gpu: int = 8
    shuffle: bool = True
    multiturn: SFTMultiturnConfig = field(default_factory=SFTMultiturnConfig)
    train_max_samples: int = -1
    val_max_samples: int = -1
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    custom_cls: SFTCustomClsConfig = field(default_factory=SFTCustomClsConfig)

    def __post_init__(self) -> None:
        check(bool(_as_file_list(self.train_files)), "train_files", "is required: one parquet file or a list of them")
        check(bool(self.prompt_key), "prompt_key", "must name a column")
        check(bool(self.response_key), "response_key", "must name a column or a dotted path")
        check(self.max_length >= 2, "max_length", f"must be >= 2, got {self.max_length}")
        check(
            self.truncation in SFT_TRUNCATION_MODES,
            "truncation",
            f"must be one of {list(SFT_TRUNCATION_MODES)}, got {self.truncation!r}",
        )
        check(self.train_batch_size >= 1, "train_batch_size", f"must be >= 1, got {self.train_batch_size}")
        check(
            self.micro_batch_size_per_gpu >= 1,
            "micro_batch_size_per_gpu",
            f"must be >= 1, got {self.micro_batch_size_per_gpu}",
        )

    @property
    def train_file_list(self) -> list[str]:
        return _as_file_list(self.train_files)

    @property
    def val_file_list(self) -> list[str]:
        return _as_file_list(self.val_files)


@dataclass
class SFTDatasetConfig(BaseConfig):
    """The ``data`` block verl's ``SFTDataset`` and ``MultiTurnSFTDataset`` read (``verl.utils.dataset``), with
    the defaults of those classes.

    Single-turn rows: ``prompt_key``/``response_key`` name columns (a one-item list is accepted for a column name);
    ``prompt_dict_keys``/``response_dict_keys`` walk into struct columns (``prompt_key=extra_info`` +
    ``prompt_dict_keys=[question]`` reads ``extra_info.question``). Conversations: ``messages_key``, ``tools_key``,
    ``enable_thinking_key`` and ``enable_thinking_default`` directly in the block (verl 0.9.1) or under
    ``multiturn`` (older releases; when that block is given it decides). ``enable_thinking_default`` also takes
    verl's YAML spelling ``none`` (the template's default). ``pad_mode`` (``right`` | ``no_padding``) is
    MultiTurnSFTDataset's. ``shuffle``/``seed`` choose which ``max_samples`` rows are kept (a seeded draw, else the
    first rows). The trainers' other keys of the block (batch sizes, file lists, ...) are kept as given.
    """

    prompt_key: str | list[str] = "prompt"
    response_key: str | list[str] = "response"
    prompt_dict_keys: str | list[str] | None = None
    response_dict_keys: str | list[str] | None = None
    max_length: int = 1024
    truncation: str = "error"
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    shuffle: bool = False
    seed: int | None = None
    pad_mode: str = "right"
    messages_key: str = "messages"
    tools_key: str = "tools"
    enable_thinking_key: str | None = "enable_thinking"
    enable_thinking_default: bool | str | None = None
    multiturn: SFTMultiturnConfig | None = None
    custom_cls: SFTCustomClsConfig = field(default_factory=SFTCustomClsConfig)

    def __post_init__(self) -> None:
        check(
            self.truncation in SFT_TRUNCATION_MODES,
            "truncation",
            f"must be one of {list(SFT_TRUNCATION_MODES)}, got {self.truncation!r}",
        )
        check(
            self.pad_mode in SFT_PAD_MODES, "pad_mode", f"must be one of {list(SFT_PAD_MODES)}, got {self.pad_mode!r}"
        )
        if isinstance(self.enable_thinking_default, str):
            check(
                self.enable_thinking_default.strip().lower() in ("none", "null"),
                "enable_thinking_default",
                f"must be true, false or none, got {self.enable_thinking_default!r}",
            )
            object.__setattr__(self, "enable_thinking_default", None)

    @property
    def prompt_path(self) -> str:
        """The dotted path of the prompt: ``prompt_key`` plus ``prompt_dict_keys`` (``extra_info.question``)."""
        return _column_path(self.prompt_key, self.prompt_dict_keys, "prompt_key")

    @property
    def response_path(self) -> str:
        """The dotted path of the response: ``response_key`` plus ``response_dict_keys``."""
        return _column_path(self.response_key, self.response_dict_keys, "response_key")

    @property
    def turns(self) -> SFTMultiturnConfig:
        """The conversation keys: the ``multiturn`` block when given, else the block's own keys; enabled."""
        if self.multiturn is not None:
            turns = self.multiturn
            return SFTMultiturnConfig(
                enable=True,
                messages_key=turns.messages_key,
                tools_key=turns.tools_key,
                enable_thinking_key=turns.enable_thinking_key,
                enable_thinking_default=turns.enable_thinking_default,
            )
        default = self.enable_thinking_default
        return SFTMultiturnConfig(
            enable=True,
            messages_key=self.messages_key,
            tools_key=self.tools_key,
            enable_thinking_key=self.enable_thinking_key,
            enable_thinking_default=None if isinstance(default, str) else default,
        )


def _column_path(column: str | list[str], fields: str | list[str] | None, key: str) -> str:
    if not isinstance(column, str):
        if len(column) != 1:
            raise ConfigError(f"is {column}: name exactly one column", key=f"data.{key}")
        column = column[0]
    names = [] if fields is None else [fields] if isinstance(fields, str) else list(fields)
    return ".".join([column, *names])
