"""A KV cache layer for the running batch that decodes into spare columns instead of reallocating.

``transformers``' ``DynamicLayer`` grows by ``torch.cat`` on every forward, so each decode step copies the whole
cache of the running batch, and the copying of a response grows with the square of its length. This layer keeps
its keys and values in buffers with spare columns at the end and exposes the filled part as a view
(``buffer[:rows, :, start:end]``):

- a decode step writes its column into the spare ones; when they run out, the buffers grow by a fraction of the
  filled length, so copies are amortised to a constant per token;
- retiring rows moves the rows after the first dropped one up inside the same buffers, and trimming shared left
  padding only moves ``start``;
- admitting rows builds new buffers (with spare columns) holding the running rows and the new ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["HeadroomLayer", "with_headroom_layers"]

MIN_HEADROOM = 64  # spare columns added at least when the buffers grow
GROWTH = 0.5  # ... or this fraction of the filled length, if larger


def _capacity_for(length: int) -> int:
    return length + max(MIN_HEADROOM, int(length * GROWTH))


class HeadroomLayer(DynamicLayer):
    """``DynamicLayer`` whose ``keys``/``values`` [rows, heads, end - start, dim] are views of larger buffers."""

    def __init__(self) -> None:
        super().__init__()
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self.rows = self.start = self.end = 0

    @property
    def capacity(self) -> int:
        """Columns the buffers hold, filled or not."""
        return 0 if self._key_buffer is None else int(self._key_buffer.shape[-2])

    @property
    def length(self) -> int:
        return self.end - self.start

    def _expose(self) -> None:
        self.keys = self._key_buffer[: self.rows, :, self.start : self.end]
        self.values = self._value_buffer[: self.rows, :, self.start : self.end]

    def assign(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Take ``keys``/``values`` [B, H, L, D] as the whole cache (no spare columns until the next step)."""
        self._key_buffer, self._value_buffer = keys, values
        self.rows, self.start, self.end = int(keys.shape[0]), 0, int(keys.shape[-2])
        self.device = keys.device
        self.is_initialized = True
        self._expose()

    def _new_buffers(self, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = list(self._key_buffer.shape)
        shape[0], shape[-2] = rows, _capacity_for(length)
        return self._key_buffer.new_empty(shape), self._value_buffer.new_empty(shape)

    def _grow(self, needed: int) -> None:
        """Move the filled columns to the front of new buffers with room for ``needed`` more and spare ones."""
        length = self.length
        keys, values = self._new_buffers(self.rows, length + needed)
        keys[:, :, :length] = self.keys
        values[:, :, :length] = self.values
        self._key_buffer, self._value_buffer = keys, values
        self.start, self.end = 0, length
        self._expose()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized or self._key_buffer is None:
            self.assign(key_states, value_states)
            return self.keys, self.values
        if key_states.shape[0] != self.rows:
            raise ValueError(
                f"HeadroomLayer.update: {key_states.shape[0]} rows of new states for a cache of {self.rows} rows"
            )
        width = int(key_states.shape[-2])
        if self.end + width > self.capacity:
            self._grow(width)
        self._key_buffer[: self.rows, :, self.end : self.end + width] = key_states
        self._value_buffer[: self.rows, :, self.end : self.end + width] = value_states
        self.end += width
        self._expose()
        return self.keys, self.values

    def keep_rows(self, rows: Sequence[int], drop_columns: int = 0) -> None:
        """Keep ``rows`` in that order and drop the first ``drop_columns`` filled columns, inside the buffers."""
        self.start += drop_columns
        targets = [i for i, row in enumerate(rows) if row != i]  # only the slots that change are copied
        if targets:
            device = self._key_buffer.device
            slots = torch.as_tensor(targets, dtype=torch.long, device=device)
            sources = torch.as_tensor([rows[i] for i in targets], dtype=torch.long, device=device)
            columns = slice(self.start, self.end)
            # the sources are gathered into new tensors first, so a row that is both read and written is read first
            self._key_buffer[slots, :, columns] = self._key_buffer[sources, :, columns]
            self._value_buffer[slots, :, columns] = self._value_buffer[sources, :, columns]
        self.rows = len(rows)
        self._expose()

    # DynamicLayer's own editing methods, kept consistent with the buffers (the engine does not call them, but code
    # that handles any transformers cache may)
    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep_rows([int(i) for i in torch.as_tensor(indices).tolist()])

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.assign(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"HeadroomLayer.crop takes a negative count of tokens to remove, got {tokens_to_remove}")
        self.end = max(self.start, self.end + tokens_to_remove)
        self._expose()

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        self.rows = self.start = self.end = 0
        super().reset()

    def append_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add rows whose cache is ``keys``/``values`` [n, H, L, D], right-aligned like the running rows.

        The shorter side is padded on the left with zeros (its attention mask hides those columns; zeros keep the
        masked products finite).
        """
        old_length, new_length = self.length, int(keys.shape[-2])
        length = max(old_length, new_length)
        total = self.rows + int(keys.shape[0])
        key_buffer, value_buffer = self._new_buffers(total, length)
        for buffer, old, new in ((key_buffer, self.keys, keys), (value_buffer, self.values, values)):
            buffer[: self.rows, :, : length - old_length].zero_()
            buffer[: self.rows, :, length - old_length : length] = old
            buffer[self.rows : total, :, : length - new_length].zero_()
            buffer[self.rows : total, :, length - new_length : length] = new
        self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self.rows, self.start, self.end = total, 0, length
        self._expose()


def with_headroom_layers(layers: list, layer_class: type[HeadroomLayer] = HeadroomLayer) -> list[HeadroomLayer]:
    """The same keys and values as ``layers`` (plain dynamic layers after a prefill), held by ``layer_class``."""
    converted = []
    for layer in layers:
        headroom = layer_class()
        headroom.assign(layer.keys, layer.values)
        converted.append(headroom)
    return converted
