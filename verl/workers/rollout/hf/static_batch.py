"""The static running batch: a KV cache of fixed capacity whose decode step has one shape per bucket.

Why: on a GPU the eager decode step of a small model is bound by launching ~1,000 kernels from Python, not by the
GPU. A step whose tensors keep their addresses and shapes can be captured once as a CUDA graph and replayed with one
launch (:mod:`decode_graphs`). That needs a cache that never moves and a step whose shape does not follow every row
that joins or leaves.

Layout: cache slot ``i`` holds row ``i`` of the batch (live rows are kept in slots ``0..size-1``). Every row's tokens
are contiguous and end at one shared column, the cursor, so a decode step writes the new keys and values of all rows
into the same column. A row's own start column, kept on the host and in ``starts``, hides the columns before it
through the attention mask; its position ids are its own, so a row computes what it would compute alone.

- admit: prompts are prefilled eagerly (left padded, in groups within the token budget) into a temporary cache whose
  columns are copied right-aligned to the cursor; if the cursor is left of the longest prompt every row moves right.
- decode: one forward over ``bucket(size)`` rows and the first ``bucket(cursor + 1)`` columns. Rows past ``size``
  (bucket padding) see only the write column, so they stay finite and are never read.
- retire: a finished row's slot takes a live row from the end (:func:`~kv_batch.compaction_order`); once every row
  starts at or past ``trim_columns`` the live columns move left to column 0.

The cache always holds every token of a row except the last sampled one, which is the next input.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import DynamicCache

from verl.workers.rollout.hf.decode_graphs import DecodeGraphs, decode_attention
from verl.workers.rollout.hf.kv_batch import cache_argument, compaction_order, left_padded, prefill_groups

__all__ = ["StaticKVCache", "StaticBatch", "default_batch_buckets", "static_cache_bytes"]

# Slot start of a free slot: past every column, so the mask shows such a row only its write column.
_FREE = 1 << 30


def default_batch_buckets(max_rows: int) -> list[int]:
    """1, 2, 4, then every multiple of 8 up to ``max_rows`` (and ``max_rows`` itself): at most 7 padding rows
    past 8, as vLLM's default capture sizes do."""
    sizes = {s for s in (1, 2, 4) if s <= max_rows} | set(range(8, max_rows + 1, 8)) | {max_rows}
    return sorted(sizes)


def model_kv_shape(model: torch.nn.Module) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a decoder-only transformers model."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return int(config.num_hidden_layers), kv_heads, head_dim


def static_cache_bytes(model: torch.nn.Module, rows: int, capacity: int) -> int:
    """Bytes of keys and values for ``rows`` slots of ``capacity`` columns in the model's dtype."""
    layers, kv_heads, head_dim = model_kv_shape(model)
    itemsize = next(model.parameters()).element_size()
    return 2 * layers * rows * kv_heads * capacity * head_dim * itemsize


def supports_static_cache(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot decode from the static cache, or None when it can (full attention in every layer)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"layer types {sorted(kinds)} (only full attention is cached statically)"
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    return None


class StaticKVCache:
    """Per-layer key/value buffers [rows, kv_heads, capacity, head_dim], handed to the model as its cache.

    During a decode forward the model calls :meth:`update` once per layer; it writes the step's keys and values into
    ``write_column`` (a device tensor, so a captured graph reads the column of every replay) and returns the visible
    window ``[:view_rows, :, :view_width]``.
    """

    def __init__(self, layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int, dtype: torch.dtype, device):
        shape = (rows, kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.write_column = torch.zeros(1, dtype=torch.long, device=device)
        self.view_rows = rows
        self.view_width = capacity

    @property
    def rows(self) -> int:
        return int(self.keys[0].shape[0])

    @property
    def capacity(self) -> int:
        return int(self.keys[0].shape[2])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        keys = self.keys[layer_idx][: self.view_rows]
        values = self.values[layer_idx][: self.view_rows]
        keys.index_copy_(2, self.write_column, key_states)
        values.index_copy_(2, self.write_column, value_states)
        return keys[:, :, : self.view_width], values[:, :, : self.view_width]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.view_width

    def move_columns(self, rows: int, source: slice, target_start: int) -> None:
        """Copy columns ``source`` of the first ``rows`` slots to start at ``target_start`` (ranges may overlap)."""
        width = source.stop - source.start
        if width <= 0 or source.start == target_start:
            return
        for buffer in (*self.keys, *self.values):
            window = buffer[:rows, :, source].clone()
            buffer[:rows, :, target_start : target_start + width].copy_(window)

    def move_rows(self, sources: torch.Tensor, targets: torch.Tensor, columns: int) -> None:
        """Copy slots ``sources`` into slots ``targets`` (the first ``columns`` columns)."""
        for buffer in (*self.keys, *self.values):
            buffer[:, :, :columns].index_copy_(0, targets, buffer[:, :, :columns].index_select(0, sources))


class StaticBatch:
    """KV cache, starts, positions and last tokens of the live rows of one model, with fixed-shape decode steps.

    Args:
        model: a decoder-only transformers model whose layers all use full attention.
        device: where the cache lives (the model's device).
        max_rows: most rows at once (``rollout.max_num_seqs``); slots grow in powers of two up to it.
        max_model_len: most tokens of one row (prompt and response); the capacity adds ``trim_columns`` to it.
        max_prefill_tokens: token budget of one prefill forward (``rollout.max_num_batched_tokens``).
        batch_buckets: row counts a decode step is padded up to (None: the exact count, as an uncaptured step needs).
        window_granularity: the visible columns are rounded up to a multiple of it (1: exact).
        graphs: captures and replays one CUDA graph per (rows, columns) bucket; None runs every step eagerly.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        *,
        max_rows: int,
        max_model_len: int,
        pad_token_id: int = 0,
        max_prefill_tokens: int | None = None,
        batch_buckets: Sequence[int] | None = None,
        window_granularity: int = 1,
        trim_columns: int | None = None,
        graphs: DecodeGraphs | None = None,
    ):
        why_not = supports_static_cache(model)
        if why_not:
            raise NotImplementedError(f"hf rollout: the static decode path does not support {why_not}")
        if max_rows < 1 or max_model_len < 2 or window_granularity < 1:
            raise ValueError(
                f"static batch needs max_rows >= 1, max_model_len >= 2 and window_granularity >= 1, got {max_rows}, "
                f"{max_model_len}, {window_granularity}"
            )
        self.model = model
        self.device = device
        self.pad_token_id = pad_token_id
        self.max_rows = max_rows
        self.max_prefill_tokens = max_prefill_tokens
        self.batch_buckets = sorted(set(batch_buckets)) if batch_buckets else None
        self.window_granularity = window_granularity
        self.trim_columns = trim_columns if trim_columns is not None else max(window_granularity, 32)
        self.capacity = max_model_len + self.trim_columns
        self.graphs = graphs
        self._cache_argument = cache_argument(model)
        self._layers, self._kv_heads, self._head_dim = model_kv_shape(model)
        self._dtype = next(model.parameters()).dtype
        self._logits_dtype = self._dtype
        self.cache: StaticKVCache | None = None
        self._columns = torch.arange(self.capacity, device=device)
        self.clear()

    # ------------------------------------------------------------------ state

    def clear(self) -> None:
        """Drop every row (abort, sleep, errors); the buffers and captured graphs stay for the next rows."""
        self.size = 0
        self.cursor = 0
        self.starts: list[int] = []
        if self.cache is not None:
            with torch.inference_mode():  # the buffers were made in inference mode; an abort may come from outside
                self.starts_t.fill_(_FREE)
                self.cache.write_column.fill_(0)

    def release(self) -> None:
        """Free the buffers and graphs (sleep): the next admission allocates them again."""
        self.clear()
        self.cache = None
        if self.graphs is not None:
            self.graphs.clear()

    @property
    def cache_length(self) -> int:
        """Columns in use (the cursor): the longest live row's cached tokens plus its left padding."""
        return self.cursor

    @property
    def slots(self) -> int:
        return 0 if self.cache is None else self.cache.rows

    def _allocate(self, rows: int, dtype: torch.dtype) -> None:
        """Buffers for at least ``rows`` slots (powers of two up to ``max_rows``) in ``dtype``, the dtype of the keys
        the model computes (a mixed-precision module computes in another dtype than it stores), keeping the live
        rows."""
        if rows <= self.slots and dtype == self._dtype:
            return
        self._dtype = dtype
        slots = min(self.max_rows, 1 << max(3, (rows - 1).bit_length()))
        slots = max(slots, self.slots)
        old = self.cache
        self.cache = StaticKVCache(
            self._layers, slots, self._kv_heads, self.capacity, self._head_dim, self._dtype, self.device
        )
        tokens = torch.zeros(slots, dtype=torch.long, device=self.device)
        positions = torch.zeros(slots, dtype=torch.long, device=self.device)
        starts = torch.full((slots,), _FREE, dtype=torch.long, device=self.device)
        if old is not None and self.size:
            live, columns = slice(0, self.size), slice(0, self.cursor)
            for new_buffer, old_buffer in zip((*self.cache.keys, *self.cache.values), (*old.keys, *old.values)):
                new_buffer[live, :, columns].copy_(old_buffer[live, :, columns].to(self._dtype))
            tokens[live] = self.tokens[live]
            positions[live] = self.positions[live]
            starts[live] = self.starts_t[live]
        self.tokens, self.positions, self.starts_t = tokens, positions, starts
        self.cache.write_column.fill_(self.cursor)
        self.logits: torch.Tensor | None = None
        if self.graphs is not None:
            self.graphs.clear()  # captured against the old buffers

    def _shift(self, delta: int) -> None:
        """Move every live row ``delta`` columns (left when negative); starts and cursor follow."""
        if delta == 0:
            return
        if self.size == 0:
            self.cursor = max(0, self.cursor + delta)
            self.cache.write_column.fill_(self.cursor)
            return
        low = min(self.starts)
        self.cache.move_columns(self.size, slice(low, self.cursor), low + delta)
        self.starts = [s + delta for s in self.starts]
        self.starts_t[: self.size] += delta
        self.cursor += delta
        self.cache.write_column.fill_(self.cursor)

    # ------------------------------------------------------------------ admission

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_argument: cache},
        )
        return out.logits[:, -1, :]

    def admit(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Prefill ``prompts`` as new rows after the live ones, in groups within ``max_prefill_tokens``; return
        their last logits [n, V]."""
        if self.size + len(prompts) > self.max_rows:
            raise ValueError(f"static batch: {self.size} + {len(prompts)} rows exceed max_rows={self.max_rows}")
        groups = prefill_groups([len(p) for p in prompts], self.max_prefill_tokens)
        logits = [self._admit_group(prompts[group]) for group in groups]
        return logits[0] if len(logits) == 1 else torch.cat(logits)

    def _admit_group(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        if width >= self.capacity:
            raise ValueError(f"static batch: a prompt of {width} tokens does not fit {self.capacity} columns")
        ids, mask, positions = left_padded(prompts, self.pad_token_id, self.device)
        prefill_cache = DynamicCache()
        logits = self._forward(ids, mask, positions, prefill_cache)
        self._logits_dtype = logits.dtype
        self._place(prefill_cache, lengths)
        return logits

    def _place(self, prefill_cache: DynamicCache, lengths: list[int]) -> None:
        """Copy a prefilled group right-aligned to the cursor into the next free slots."""
        count, width = len(lengths), max(lengths)
        first = prefill_cache.layers[0].keys if hasattr(prefill_cache, "layers") else prefill_cache.key_cache[0]
        self._allocate(self.size + count, first.dtype)
        if self.size == 0:
            self.cursor = width
            self.cache.write_column.fill_(self.cursor)
        if self.cursor >= self.capacity:
            self._trim(force=True)
        if self.cursor < width:
            self._shift(width - self.cursor)
        rows, columns = slice(self.size, self.size + count), slice(self.cursor - width, self.cursor)
        layers = prefill_cache.layers if hasattr(prefill_cache, "layers") else None
        for index in range(self._layers):
            if layers is not None:
                keys, values = layers[index].keys, layers[index].values
            else:  # transformers releases before per-layer cache objects
                keys, values = prefill_cache.key_cache[index], prefill_cache.value_cache[index]
            self.cache.keys[index][rows, :, columns].copy_(keys)
            self.cache.values[index][rows, :, columns].copy_(values)
        starts = [self.cursor - length for length in lengths]
        self.starts.extend(starts)
        self.starts_t[rows] = torch.as_tensor(starts, device=self.device)
        self.positions[rows] = torch.as_tensor(lengths, device=self.device)
        self.tokens[rows] = 0
        self.size += count

    def set_last_tokens(self, rows: slice | torch.Tensor, tokens: torch.Tensor) -> None:
        if isinstance(rows, slice):
            rows = slice(rows.start or 0, self.size if rows.stop is None else rows.stop)
        self.tokens[rows] = tokens

    # ------------------------------------------------------------------ decode

    def _batch_bucket(self) -> int:
        if self.batch_buckets is None:
            return self.size
        index = bisect.bisect_left(self.batch_buckets, self.size)
        bucket = self.batch_buckets[index] if index < len(self.batch_buckets) else self.size
        return min(bucket, self.slots)

    def _window_bucket(self) -> int:
        step = self.window_granularity
        return min(self.capacity, -(-(self.cursor + 1) // step) * step)

    def decode(self) -> torch.Tensor:
        """Feed every row's last sampled token; return next-token logits [size, V]."""
        if self.cursor >= self.capacity:
            self._trim(force=True)
        rows, width = self._batch_bucket(), self._window_bucket()
        captured = self.graphs is not None and self.graphs.capture and rows in (self.batch_buckets or ())
        if captured:
            if self.logits is None:
                vocab = int(self.model.get_output_embeddings().weight.shape[0])
                self.logits = torch.empty(self.slots, vocab, dtype=self._logits_dtype, device=self.device)
            self.graphs.run((rows, width), self._step_function(rows, width, into_buffer=True))
            logits = self.logits[: self.size]
        elif self.graphs is not None and not self.graphs.capture:
            logits = self.graphs.run((rows, width), self._step_function(rows, width, into_buffer=False))[: self.size]
        else:
            logits = self._step_function(rows, width, into_buffer=False)()[: self.size]
        self.positions += 1
        self.cache.write_column += 1
        self.cursor += 1
        return logits

    def _step_function(self, rows: int, width: int, into_buffer: bool) -> Callable[[], torch.Tensor]:
        """One decode forward over ``rows`` slots and ``width`` columns. It reads only the batch's own tensors and
        writes only the write column and (``into_buffer``) the logits buffer, so running it twice is harmless."""
        cache, model = self.cache, self.model

        def step() -> torch.Tensor:
            columns = self._columns[:width].unsqueeze(0)
            starts = self.starts_t[:rows].unsqueeze(1)
            write = cache.write_column.unsqueeze(1)
            visible = ((columns >= starts) | (columns == write)) & (columns <= write)
            cache.view_rows, cache.view_width = rows, width
            with decode_attention(model):
                out = model(
                    input_ids=self.tokens[:rows].unsqueeze(1),
                    attention_mask=visible[:, None, None, :],
                    position_ids=self.positions[:rows].unsqueeze(1),
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_argument: cache},
                )
            logits = out.logits[:, -1, :]
            if into_buffer:
                self.logits[:rows].copy_(logits)
            return logits

        return step

    # ------------------------------------------------------------------ retirement

    def retire(self, alive: Sequence[bool]) -> list[int]:
        """Drop the rows whose ``alive`` flag is False; return the kept rows' old indices in their new order."""
        order = compaction_order(alive)
        self.keep(order)
        return order

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (in that order), then move the columns left once every row starts past
        ``trim_columns``."""
        if list(rows) == list(range(self.size)):
            return
        if not rows:
            self.clear()
            return
        count = len(rows)
        moved = [(target, source) for target, source in enumerate(rows) if target != source]
        if moved:
            targets = torch.as_tensor([t for t, _ in moved], device=self.device)
            sources = torch.as_tensor([s for _, s in moved], device=self.device)
            if {t for t, _ in moved} & {s for _, s in moved}:  # a permutation among live slots: copy via a gather
                order = torch.as_tensor(list(rows), device=self.device)
                targets, sources = torch.arange(count, device=self.device), order
            self.cache.move_rows(sources, targets, self.cursor)
            for tensor in (self.tokens, self.positions, self.starts_t):
                tensor.index_copy_(0, targets, tensor.index_select(0, sources))
        self.starts = [self.starts[source] for source in rows]
        self.starts_t[count : self.size] = _FREE
        self.size = count
        self._trim()

    def _trim(self, force: bool = False) -> None:
        low = min(self.starts) if self.starts else 0
        if low > 0 and (force or low >= self.trim_columns):
            self._shift(-low)
        if force and self.cursor >= self.capacity:
            raise RuntimeError(
                f"static batch: no free column left (cursor {self.cursor}, capacity {self.capacity}); a row is longer "
                "than max_model_len"
            )
