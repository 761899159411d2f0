"""create_rl_dataset: the built-in RLHFDataset or a user class named by ``data.custom_cls.path``/``name``."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from torch.utils.data import Dataset, Subset

from verl.utils.config_builder import as_config
from verl.utils.dataset.config import CustomClsConfig
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.import_utils import load_extern_object

__all__ = ["create_rl_dataset", "get_dataset_class"]

logger = logging.getLogger(__name__)


def get_dataset_class(data_config: Any) -> type[Dataset]:
    """The class ``data.custom_cls`` names (must subclass ``torch.utils.data.Dataset``), else ``RLHFDataset``."""
    custom = as_config(
        None if data_config is None else data_config.get("custom_cls"), CustomClsConfig, "data.custom_cls"
    )
    path, name = custom.path, custom.name
    if not path:
        return RLHFDataset
    cls = load_extern_object(path, name or "", config_key="data.custom_cls.path", what="dataset class")
    if not (isinstance(cls, type) and issubclass(cls, Dataset)):
        raise TypeError(
            f"data.custom_cls.name={name!r} in {path!r} must be a subclass of torch.utils.data.Dataset, got {cls!r}"
        )
    return cls


def create_rl_dataset(
    data_paths: str | os.PathLike | Sequence[str | os.PathLike],
    data_config: Any,
    tokenizer: Any,
    processor: Any = None,
    is_train: bool = True,
    max_samples: int = -1,
) -> Dataset:
    """Build the train (``is_train``) or validation data set as ``cls(data_files, tokenizer, config, processor)``;
    ``max_samples > 0`` keeps only its first ``max_samples`` rows (as verl's train_max_samples key asks)."""
    cls = get_dataset_class(data_config)
    dataset = cls(data_files=data_paths, tokenizer=tokenizer, config=data_config, processor=processor)
    if 0 < max_samples < len(dataset):
        dataset = Subset(dataset, range(max_samples))
    logger.info("%s data set: %s with %d rows", "train" if is_train else "validation", cls.__name__, len(dataset))
    return dataset
