"""A data loader whose position is part of the checkpoint.

``StatefulDataLoader`` (torchdata) adds ``state_dict()``/``load_state_dict()`` to ``torch.utils.data.DataLoader``: the
trainer saves the state with each checkpoint and a resumed run continues with the very batch the interrupted run would
have drawn next, mid-epoch included.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from verl.utils.dataset.collate import collate_fn as default_collate_fn

__all__ = ["StatefulDataLoader", "check_loader_state", "create_stateful_dataloader"]


def create_stateful_dataloader(
    dataset: Dataset,
    batch_size: int,
    sampler: Sampler | None = None,
    collate_fn: Callable[[list], Any] | None = None,
    num_workers: int = 0,
    drop_last: bool = True,
) -> StatefulDataLoader:
    """``StatefulDataLoader`` with verl's collate function; ``drop_last`` keeps every step's batch full."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    with warnings.catch_warnings():
        # torchdata 0.11 calls the deprecated torch.set_vital in its constructor; the warning is about torchdata.
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return StatefulDataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=collate_fn or default_collate_fn,
            num_workers=num_workers,
            drop_last=drop_last,
        )


def check_loader_state(loader: StatefulDataLoader, state: Any, where: str) -> None:
    """Refuse a saved position that ``loader`` cannot resume from, before anything is restored.

    ``load_state_dict`` takes any dict and fails only when the loader is next iterated, after a resumed run has
    loaded its workers and perhaps deleted the checkpoint (``trainer.del_local_ckpt_after_load``). ``where`` names
    the file the state came from.
    """
    if not isinstance(state, dict):
        raise ValueError(f"{where}: the saved data loader position is a {type(state).__name__}, not a dict")
    expected, saved = set(loader.state_dict()), set(state)
    if saved != expected:
        raise ValueError(
            f"{where}: the saved data loader position does not fit this data loader (missing "
            f"{sorted(expected - saved)}, unexpected {sorted(saved - expected)}); was data.dataloader_num_workers "
            "changed since it was saved?"
        )
