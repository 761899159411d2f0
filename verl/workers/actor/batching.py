"""Mini-batch and micro-batch plans shared by the actor and the critic.

A PPO update walks ``epochs x mini-batches`` optimizer steps; each mini-batch is
cut into micro-batches whose gradients accumulate. Micro-batches are either a
fixed number of samples or, with dynamic batch sizing, packed under a token
budget by ``verl.utils.seqlen_balancing``. The loss of each micro-batch is
scaled so that the accumulated gradient equals the gradient of the whole
mini-batch, whatever the micro-batch split.

A padded forward (no ``use_remove_padding``) costs rows x the longest row of its micro-batch, so fixed-size
micro-batches are cut from the rows in order of length: on long-tailed generations a few long answers then share
micro-batches instead of each padding a micro-batch of short ones to the limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.utils.seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch, take_rows

__all__ = [
    "require_keys",
    "select_batch",
    "read_meta",
    "positive_int",
    "iter_mini_batches",
    "length_order",
    "split_micro_batches",
    "restore_order",
    "micro_loss_scale",
    "append_metrics",
]

_MISSING = object()


def require_keys(batch: TensorDict, keys: Iterable[str], where: str) -> None:
    """Fail early, naming every missing tensor key, instead of a bare KeyError deep inside a forward."""
    present = set(batch.keys())
    missing = [key for key in keys if key not in present]
    if missing:
        raise KeyError(f"{where} needs batch keys {missing}; the batch has {sorted(present)}")


def select_batch(data: DataProto, keys: list[str], where: str) -> TensorDict:
    """The tensors ``keys`` of ``data`` as one TensorDict (non-tensor columns are not needed for training)."""
    if data.batch is None:
        raise KeyError(f"{where} needs batch keys {keys}; the DataProto has no tensor batch")
    require_keys(data.batch, keys, where)
    return data.batch.select(*keys)


def read_meta(data: DataProto, key: str, where: str, default: Any = _MISSING) -> Any:
    """``data.meta_info[key]``; without a default a missing key is an error naming it."""
    if key in data.meta_info and data.meta_info[key] is not None:
        return data.meta_info[key]
    if default is _MISSING:
        raise KeyError(f"{where} needs meta_info['{key}']; meta_info has {sorted(data.meta_info)}")
    return default


def positive_int(value: Any, name: str) -> int:
    """Validate a size read from a config or meta_info, naming it on failure."""
    if value is None or isinstance(value, bool) or int(value) != value or int(value) <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def iter_mini_batches(
    batch: TensorDict, mini_batch_size: int, epochs: int, shuffle: bool, generator: torch.Generator
) -> Iterator[TensorDict]:
    """Yield the mini-batches of every epoch; with ``shuffle`` each epoch draws a fresh order from ``generator``."""
    size = batch.batch_size[0]
    for _ in range(epochs):
        epoch_batch = batch[torch.randperm(size, generator=generator)] if shuffle else batch
        yield from epoch_batch.split(mini_batch_size)


def length_order(batch: TensorDict) -> torch.Tensor:
    """Row indices by response length, then prompt length (stable): the order that least pads fixed-size
    micro-batches of a padded forward, whose response columns stop at a micro-batch's longest answer."""
    mask = batch["attention_mask"]
    mask = mask.reshape(mask.shape[0], -1)
    width = batch["responses"].shape[-1] if "responses" in batch.keys() else 0
    response = mask[:, mask.shape[1] - width :].sum(-1)
    prompt = mask[:, : mask.shape[1] - width].sum(-1)
    return torch.argsort(response * (mask.shape[1] + 1) + prompt, stable=True)


def split_micro_batches(
    batch: TensorDict,
    *,
    micro_batch_size: int | None,
    use_dynamic_bsz: bool,
    max_token_len: int | None,
    dp_group: Any = None,
    group_by_length: bool = False,
) -> tuple[list[TensorDict], list[list[int]] | None]:
    """Cut ``batch`` into micro-batches.

    Returns the micro-batches and, where samples were reordered (dynamic sizing
    balances tokens; ``group_by_length`` cuts fixed-size micro-batches from the
    rows in :func:`length_order`), the original indices of each micro-batch so
    outputs can be put back in order with :func:`restore_order`; ``None`` when
    order is kept. Under dynamic sizing every rank of ``dp_group`` (default: the
    whole default process group when torch.distributed is initialised) gets the
    same number of micro-batches, because sharded models run collectives in
    every forward.
    """
    if use_dynamic_bsz:
        if dp_group is None and dist.is_available() and dist.is_initialized():
            dp_group = dist.group.WORLD
        micro_batches, batch_idx = rearrange_micro_batches(batch, max_token_len=max_token_len, dp_group=dp_group)
        return list(micro_batches), [list(map(int, idx)) for idx in batch_idx]
    if group_by_length and micro_batch_size < batch.batch_size[0]:
        order = length_order(batch)
        parts = order.split(micro_batch_size)
        return [take_rows(batch, part) for part in parts], [part.tolist() for part in parts]
    return list(batch.split(micro_batch_size)), None


def restore_order(outputs: list[torch.Tensor], batch_idx: list[list[int]] | None) -> torch.Tensor:
    """Concatenate per-micro-batch outputs back into the order of the input batch."""
    stacked = torch.cat(outputs, dim=0)
    if batch_idx is None:
        return stacked
    return restore_dynamic_batch(stacked, batch_idx)


def micro_loss_scale(micro_mask: torch.Tensor, mini_mask: torch.Tensor, loss_agg_mode: str) -> float:
    """Weight of one micro-batch's loss in its mini-batch, so accumulated gradients equal the mini-batch gradient.

    ``token-mean`` averages over tokens, so a micro-batch weighs its share of the
    mini-batch's tokens; the sequence modes average over sequences that have
    tokens, so it weighs its share of those sequences.
    """
    if loss_agg_mode == "token-mean":
        micro_count, mini_count = micro_mask.sum(), mini_mask.sum()
    else:
        micro_count, mini_count = (micro_mask.sum(-1) > 0).sum(), (mini_mask.sum(-1) > 0).sum()
    mini_count = float(mini_count.item())
    if mini_count == 0:
        return micro_mask.shape[0] / mini_mask.shape[0]
    return float(micro_count.item()) / mini_count


def append_metrics(metrics: dict[str, list[float]], new: dict[str, Any]) -> None:
    """Append scalar metrics (floats or 0-d tensors) to the per-step lists of ``metrics``."""
    for key, value in new.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().float().item()
        metrics.setdefault(key, []).append(float(value))
