"""Prompt data: RLHFDataset over parquet files, its collate function, samplers and a checkpointable loader; and
RMDataset (preference pairs); verl's SFT data sets (``SFTDataset``, ``MultiTurnSFTDataset``).

Everything loads on first access: :mod:`verl.utils.dataset.config`, which the config dataclasses import, must not
pull torch into the driver (``main_ppo``'s driver only starts Ray and the task runner)."""

from typing import TYPE_CHECKING

from verl.utils.import_utils import lazy_exports

if TYPE_CHECKING:
    from verl.utils.dataset.collate import collate_fn
    from verl.utils.dataset.dataloader import StatefulDataLoader, create_stateful_dataloader
    from verl.utils.dataset.factory import create_rl_dataset, get_dataset_class
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.dataset.rm_dataset import RMDataset
    from verl.utils.dataset.sampler import create_rl_sampler
    from verl.utils.dataset.sft_dataset import SFTDataset
    from verl.utils.dataset.vision_utils import process_image, process_video

__all__ = [
    "MultiTurnSFTDataset",
    "RLHFDataset",
    "RMDataset",
    "SFTDataset",
    "StatefulDataLoader",
    "collate_fn",
    "create_rl_dataset",
    "create_rl_sampler",
    "create_stateful_dataloader",
    "get_dataset_class",
    "process_image",
    "process_video",
]

_LAZY = {
    "collate_fn": "verl.utils.dataset.collate",
    "StatefulDataLoader": "verl.utils.dataset.dataloader",
    "create_stateful_dataloader": "verl.utils.dataset.dataloader",
    "create_rl_dataset": "verl.utils.dataset.factory",
    "get_dataset_class": "verl.utils.dataset.factory",
    "RLHFDataset": "verl.utils.dataset.rl_dataset",
    "RMDataset": "verl.utils.dataset.rm_dataset",
    "create_rl_sampler": "verl.utils.dataset.sampler",
    "process_image": "verl.utils.dataset.vision_utils",
    "process_video": "verl.utils.dataset.vision_utils",
    "SFTDataset": "verl.utils.dataset.sft_dataset",
    "MultiTurnSFTDataset": "verl.utils.dataset.multiturn_sft_dataset",
}

__getattr__ = lazy_exports(__name__, _LAZY)
