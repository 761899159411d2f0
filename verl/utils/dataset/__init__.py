"""Prompt data: RLHFDataset over parquet files, its collate function, samplers and a checkpointable loader; and
RMDataset (preference pairs). verl's SFT data sets (``SFTDataset``, ``MultiTurnSFTDataset``) are resolved on first
access."""

from verl.utils.dataset.collate import collate_fn
from verl.utils.dataset.dataloader import StatefulDataLoader, create_stateful_dataloader
from verl.utils.dataset.factory import create_rl_dataset, get_dataset_class
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.dataset.rm_dataset import RMDataset
from verl.utils.dataset.sampler import create_rl_sampler
from verl.utils.dataset.vision_utils import process_image, process_video
from verl.utils.import_utils import lazy_exports

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


# verl exported its SFT data sets here; they are loaded on first use, so RL users do not import the SFT stack.
_LAZY = {
    "SFTDataset": "verl.utils.dataset.sft_dataset",
    "MultiTurnSFTDataset": "verl.utils.dataset.multiturn_sft_dataset",
}

__getattr__ = lazy_exports(__name__, _LAZY)
