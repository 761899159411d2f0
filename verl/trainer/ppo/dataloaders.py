"""The train and validation data loaders every trainer (and the fully-async rollouter) builds the same way.

Building them in one place is what lets a rollouter iterating its own loader see the prompts in the trainer's
order (the async-vs-sync equivalence relies on it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.utils.dataset.collate import collate_fn as default_collate_fn
from verl.utils.dataset.dataloader import create_stateful_dataloader

__all__ = ["build_dataloaders", "generation_batch_size"]


def build_dataloaders(
    config: Any,
    tokenizer: Any,
    processor: Any = None,
    train_dataset: Any = None,
    val_dataset: Any = None,
    collate_fn: Callable | None = None,
    train_sampler: Any = None,
    ppo_config: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """(train set, val set, train loader, val loader) from ``config.data``; given data sets and samplers win.

    The data sets and samplers get ``config.data`` as it is (verl's factories and users' data set classes read a
    DictConfig); the sizes and seeds come from the typed ``ppo_config`` (built from ``config`` when not given)."""
    from verl.trainer.config.resolve import as_ppo_config
    from verl.utils.dataset.factory import create_rl_dataset
    from verl.utils.dataset.sampler import create_rl_sampler, create_val_sampler

    data = config.data
    typed = as_ppo_config(config) if ppo_config is None else ppo_config
    sizes = typed.data
    # data.seed orders the prompts when set; otherwise trainer.seed does
    order_seed = sizes.seed if sizes.seed is not None else typed.trainer.seed
    if train_dataset is None:
        train_dataset = create_rl_dataset(
            data.train_files,
            data,
            tokenizer,
            processor,
            is_train=True,
            max_samples=sizes.train_max_samples,
        )
    if val_dataset is None and sizes.val_files:
        val_dataset = create_rl_dataset(
            data.val_files,
            data,
            tokenizer,
            processor,
            is_train=False,
            max_samples=sizes.val_max_samples,
        )
    if train_sampler is None:
        train_sampler = create_rl_sampler(data, train_dataset, seed=order_seed)
    collate_fn = collate_fn or default_collate_fn
    # one generation batch per loader batch: data.gen_batch_size prompts when set (verl's dynamic sampling
    # generates more than it trains on), else data.train_batch_size
    gen_batch_key, gen_batch_size = generation_batch_size(sizes)
    train_dataloader = create_stateful_dataloader(
        train_dataset,
        batch_size=gen_batch_size,
        sampler=train_sampler,
        collate_fn=collate_fn,
        num_workers=sizes.dataloader_num_workers,
        drop_last=True,
    )
    if len(train_dataloader) == 0:
        raise ValueError(
            f"{gen_batch_key}={gen_batch_size} is larger than the train set "
            f"({len(train_dataset)} rows in {data.train_files}); lower it or add data"
        )
    val_dataloader = None
    if val_dataset is not None:
        val_batch_size = sizes.val_batch_size or len(val_dataset)
        val_sampler = create_val_sampler(data, val_dataset, seed=order_seed)
        val_dataloader = create_stateful_dataloader(
            val_dataset,
            batch_size=int(val_batch_size),
            sampler=val_sampler,
            collate_fn=collate_fn,
            drop_last=False,
        )
    return train_dataset, val_dataset, train_dataloader, val_dataloader


def generation_batch_size(data_config: Any) -> tuple[str, int]:
    """``(key, prompts)`` of one generation batch: ``data.gen_batch_size`` when set, else ``data.train_batch_size``."""
    if data_config.gen_batch_size:
        return "data.gen_batch_size", int(data_config.gen_batch_size)
    return "data.train_batch_size", int(data_config.train_batch_size)
