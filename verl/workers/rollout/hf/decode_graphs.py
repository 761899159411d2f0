"""CUDA graphs of the static decode step, one per (rows, columns) bucket, and the attention it runs.

A decode step of a small model launches ~1,000 kernels; eagerly, the GPU waits on Python for most of the step.
Captured once as a ``torch.cuda.CUDAGraph`` and replayed, the whole forward is one launch. A graph holds the addresses
of every tensor it touched, so it stays valid only while the model's parameters and buffers keep theirs: weight
updates copy in place (:func:`~model_io.load_named_tensors`), and :meth:`DecodeGraphs.check` drops every graph when
an address changed (a model moved off the device for sleep and back, or parameters rebuilt by a trainer).

Without capture (a CPU, or ``rollout.enforce_eager=true``) the same object runs each step eagerly and keeps the same
bookkeeping, so the bucket choice and invalidation are exercised everywhere.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Hashable, Iterator

import torch

__all__ = ["DecodeGraphs", "decode_attention", "grouped_decode_attention", "DECODE_ATTENTION"]

logger = logging.getLogger(__name__)

#: name under which :func:`grouped_decode_attention` is registered with transformers' attention interface
DECODE_ATTENTION = "verl_grouped_decode"


def grouped_decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention of one query token per row against its key/value heads without repeating them.

    The query heads that share a key/value head become that head's query rows ([B, kv_heads, group, D]), so the
    keys and values are read once instead of once per query head, as ``repeat_kv`` would copy them.
    """
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("hf rollout: the static decode step does not support attention soft-capping")
    batch, heads, length, dim = query.shape
    if length != 1:
        raise ValueError(f"grouped_decode_attention takes one query token per row, got {length}")
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling
    )
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface

    if DECODE_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(DECODE_ATTENTION, grouped_decode_attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # pragma: no cover - releases without mask interfaces
        return
    if DECODE_ATTENTION not in AttentionMaskInterface._global_mapping:
        AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


@contextlib.contextmanager
def decode_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model``'s attention through :func:`grouped_decode_attention` inside the block, then restore it.

    The static step hands every layer a 4-D boolean mask and one query token per row, which this function serves
    for any model whatever attention it trains with (flash attention takes no such mask).
    """
    _register()
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = DECODE_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous


def _addresses(model: torch.nn.Module) -> tuple[int, ...]:
    return tuple(t.data_ptr() for t in (*model.parameters(), *model.buffers()))


class DecodeGraphs:
    """One captured decode step per bucket key, replayed on every later step of that bucket.

    Args:
        device: the model's device.
        capture: capture CUDA graphs (a CUDA device and not ``enforce_eager``); False runs every step eagerly.
    """

    def __init__(self, device: torch.device, capture: bool):
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.device = device
        self.capture = capture
        self._graphs: dict[Hashable, torch.cuda.CUDAGraph | None] = {}
        self._pool = None
        self._addresses: tuple[int, ...] | None = None
        #: why capture was switched off after a failed capture (the steps then run eagerly), else None
        self.failure: str | None = None
        #: graphs captured and steps replayed (or run eagerly, without capture) over this object's life
        self.captures = 0
        self.replays = 0

    @property
    def buckets(self) -> list[Hashable]:
        """Keys of the steps captured (or seen, without capture) since the last :meth:`clear`."""
        return list(self._graphs)

    def clear(self) -> None:
        """Forget every graph (the buffers they captured are gone or moved)."""
        self._graphs.clear()
        self._pool = None
        self._addresses = None

    def check(self, model: torch.nn.Module) -> bool:
        """Drop the graphs when a parameter or buffer of ``model`` moved since they were captured; True if dropped."""
        addresses = _addresses(model)
        stale = self._addresses is not None and addresses != self._addresses
        if stale:
            logger.info("hf rollout: model tensors moved; %d decode graphs will be captured again", len(self._graphs))
            self.clear()
        self._addresses = addresses
        return stale

    def run(self, key: Hashable, step: Callable[[], object]) -> object:
        """Run ``step`` for bucket ``key``: capture it on first use, replay it afterwards. Returns what an eager
        ``step`` returned, and None after a replay (a captured step leaves its results in its own buffers).

        ``step`` must be idempotent and read only tensors that outlive the graph: it runs once eagerly (warm-up on
        a side stream, which also sets up cuBLAS and attention plans outside the capture) and is then captured.
        """
        if not self.capture:
            self._graphs.setdefault(key, None)
            self.replays += 1
            return step()
        graph = self._graphs.get(key)
        if graph is None:
            try:
                graph = self._capture(step)
            except Exception as exc:  # noqa: BLE001 - a model the capture cannot hold still decodes, eagerly
                self.failure = f"{type(exc).__name__}: {exc}"
                logger.exception("hf rollout: capturing the decode step failed; decoding eagerly from now on")
                self.capture = False
                self.clear()
                self.replays += 1
                return step()
            self._graphs[key] = graph
        graph.replay()
        self.replays += 1
        return None

    def _capture(self, step: Callable[[], object]) -> torch.cuda.CUDAGraph:
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            step()
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            step()
        if self._pool is None:
            self._pool = graph.pool()
        self.captures += 1
        return graph
