"""Prompt data: RLHFDataset over parquet files, its collate function, samplers and a checkpointable loader."""

from verl.utils.dataset.collate import collate_fn
from verl.utils.dataset.dataloader import StatefulDataLoader, create_stateful_dataloader
from verl.utils.dataset.factory import create_rl_dataset, get_dataset_class
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.dataset.sampler import create_rl_sampler

__all__ = [
    "RLHFDataset",
    "StatefulDataLoader",
    "collate_fn",
    "create_rl_dataset",
    "create_rl_sampler",
    "create_stateful_dataloader",
    "get_dataset_class",
]
