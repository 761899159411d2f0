"""DataConfig (group ``data``): the prompt data set, its batching and truncation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["TRUNCATION_MODES", "CustomClsConfig", "DataConfig", "SamplerConfig"]

TRUNCATION_MODES = ("error", "left", "right", "middle")


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
    ``inert_keys.py`` lists have no effect here (it says why for each)."""

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
    image_patch_size: int = 14
    audio_key: str = "audios"
    return_multi_modal_inputs: bool = True
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)

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
