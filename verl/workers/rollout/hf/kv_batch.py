"""The running batch: a padded KV cache whose rows are requests joining and leaving between steps.

Layout: every row is right-aligned, so the newest token of every row sits in the last cache column
and a row's padding is on its left, hidden by its attention-mask row. Each row keeps its own
position ids, so a request computes exactly what it would compute alone (up to float rounding).

- admit: newly admitted prompts are prefilled together (left padded) in a fresh cache; it and the running
  cache are left-padded to a common length and stacked on the batch axis. With a token budget the prompts are
  prefilled in consecutive groups whose padded size (rows x longest prompt) stays within it, each merged in turn.
- decode: one forward of the last sampled token of every row; its keys and values go into spare cache
  columns (:mod:`kv_headroom`) instead of a reallocated cache.
- retire: each finished row's slot below the new size takes a live row from the end (:func:`compaction_order`),
  so a step copies the caches of as many rows as finished rather than of every row after the first finished one;
  leading columns that are padding for every remaining row are trimmed so the cache never grows past the longest
  live row.

The cache always holds every token of a row except the last sampled one, which is the next input.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from verl.workers.rollout.hf.kv_headroom import HeadroomLayer, with_headroom_layers

__all__ = ["RunningBatch", "compaction_order", "left_padded", "prefill_groups"]


def compaction_order(alive: Sequence[bool]) -> list[int]:
    """The old indices of the live rows in their new order: live rows stay in their slots, and each finished row's
    slot below the new size takes one of the live rows past it (rows decode independently, so their order is
    free)."""
    size = sum(1 for flag in alive if flag)
    order = list(range(size))
    movers = [i for i in range(size, len(alive)) if alive[i]]
    holes = [i for i in range(size) if not alive[i]]
    for hole, row in zip(holes, movers, strict=True):
        order[hole] = row
    return order


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    if width == 0:
        return t
    shape = list(t.shape)
    shape[dim] = width
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _check_prefill_budget(max_tokens: int | None) -> None:
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"rollout.max_num_batched_tokens must be >= 1, got {max_tokens}")


def prefill_groups(lengths: Sequence[int], max_tokens: int | None) -> list[slice]:
    """Consecutive groups of prompts whose padded prefill (rows x longest prompt) fits ``max_tokens``.

    A prompt longer than the budget is prefilled alone; ``None`` puts every prompt in one group.
    """
    _check_prefill_budget(max_tokens)
    if max_tokens is None:
        return [slice(0, len(lengths))] if lengths else []
    groups, start, width = [], 0, 0
    for index, length in enumerate(lengths):
        grown = max(width, length)
        if index > start and grown * (index - start + 1) > max_tokens:
            groups.append(slice(start, index))
            start, grown = index, length
        width = grown
    if lengths:
        groups.append(slice(start, len(lengths)))
    return groups


def left_padded(
    prompts: Sequence[Sequence[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, attention mask and position ids [n, longest prompt] of ``prompts`` padded on the left, so that
    every row's last token sits in the last column (the layout both running batches prefill in)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.as_tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(dim=1) - 1).clamp(min=0)


def cache_argument(model: torch.nn.Module) -> str:
    """Name of the forward argument that takes the KV cache: ``cache`` in newer transformers releases, which
    deprecate the older ``past_key_values`` (still the only one in earlier releases)."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class RunningBatch:
    """KV cache, attention mask, positions and last tokens of the live rows of one model."""

    #: cache layer that holds each transformer layer's keys and values (``bench/kv_cache_growth.py`` swaps in a
    #: ``torch.cat``-per-step layer to measure what the headroom saves)
    layer_class: type[HeadroomLayer] = HeadroomLayer

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        pad_token_id: int = 0,
        max_prefill_tokens: int | None = None,
    ):
        self.model = model
        self.device = device
        self.pad_token_id = pad_token_id
        _check_prefill_budget(max_prefill_tokens)
        self.max_prefill_tokens = max_prefill_tokens
        self._cache_argument = cache_argument(model)
        self.clear()

    def clear(self) -> None:
        """Drop every row and the cache (used by abort, sleep and errors)."""
        self.cache: DynamicCache | None = None
        self.attention_mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)
        self.next_position = torch.zeros(0, dtype=torch.long, device=self.device)
        self.last_tokens = torch.zeros(0, dtype=torch.long, device=self.device)

    @property
    def size(self) -> int:
        return int(self.last_tokens.shape[0])

    @property
    def cache_length(self) -> int:
        return int(self.attention_mask.shape[1])

    def _forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, cache: DynamicCache
    ) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_argument: cache},
        )
        return out.logits[:, -1, :]

    @staticmethod
    def _check_layers(cache: DynamicCache) -> None:
        for index, layer in enumerate(cache.layers):
            if getattr(layer, "is_sliding", False) or not getattr(layer, "is_initialized", False):
                raise NotImplementedError(
                    f"hf rollout: cache layer {index} ({type(layer).__name__}) is not a plain dynamic layer, "
                    "which the running batch cannot merge"
                )

    def admit(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Prefill ``prompts`` as new rows appended at the end of the batch, in groups within
        ``max_prefill_tokens``; return their last logits [n, V]."""
        groups = prefill_groups([len(p) for p in prompts], self.max_prefill_tokens)
        if len(groups) == 1:
            return self._admit_group(prompts)
        return torch.cat([self._admit_group(prompts[group]) for group in groups])

    def _admit_group(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        lengths = [len(p) for p in prompts]
        ids, mask, positions = left_padded(prompts, self.pad_token_id, self.device)
        cache = DynamicCache()
        logits = self._forward(ids, mask, positions, cache)
        self._check_layers(cache)
        cache.layers[:] = with_headroom_layers(cache.layers, self.layer_class)
        self._merge(cache, mask)
        self.next_position = torch.cat([self.next_position, torch.as_tensor(lengths, device=self.device)])
        self.last_tokens = torch.cat(
            [self.last_tokens, torch.zeros(len(prompts), dtype=torch.long, device=self.device)]
        )
        return logits

    def _merge(self, new_cache: DynamicCache, new_mask: torch.Tensor) -> None:
        if self.size == 0 or self.cache is None:
            self.cache, self.attention_mask = new_cache, new_mask
            return
        length = max(self.cache_length, new_mask.shape[1])
        pad_old, pad_new = length - self.cache_length, length - new_mask.shape[1]
        for old, new in zip(self.cache.layers, new_cache.layers):
            old.append_rows(new.keys, new.values)
        self.attention_mask = torch.cat(
            [_left_pad(self.attention_mask, pad_old, 1), _left_pad(new_mask, pad_new, 1)], dim=0
        )

    def set_last_tokens(self, rows: slice | torch.Tensor, tokens: torch.Tensor) -> None:
        self.last_tokens[rows] = tokens

    def decode(self) -> torch.Tensor:
        """Feed every row's last sampled token; return next-token logits [B, V]."""
        mask = torch.cat([self.attention_mask, self.attention_mask.new_ones(self.size, 1)], dim=1)
        logits = self._forward(self.last_tokens.unsqueeze(1), mask, self.next_position.unsqueeze(1), self.cache)
        self.attention_mask = mask
        self.next_position = self.next_position + 1
        return logits

    def retire(self, alive: Sequence[bool]) -> list[int]:
        """Drop the rows whose ``alive`` flag is False; return the kept rows' old indices in their new order."""
        order = compaction_order(alive)
        self.keep(order)
        return order

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (in that order) and trim columns that are padding for all of them."""
        if len(rows) == self.size:
            return
        if not rows:
            self.clear()
            return
        index = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        mask = self.attention_mask.index_select(0, index)
        live = mask.any(dim=0).nonzero()
        start = int(live[0]) if live.numel() else mask.shape[1]
        self.attention_mask = mask[:, start:]
        for layer in self.cache.layers:
            layer.keep_rows(rows, start)
        self.next_position = self.next_position.index_select(0, index)
        self.last_tokens = self.last_tokens.index_select(0, index)
