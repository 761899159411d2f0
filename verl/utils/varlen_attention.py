"""Variable-length ("varlen") attention for packed forwards of Hugging Face models, without flash-attn.

A packed forward (``use_remove_padding``) puts every real token of a micro-batch in one row and restarts
``position_ids`` at each sequence. With ``attn_implementation="sdpa"``, transformers (5.x) then builds a
block-diagonal ``[T, T]`` mask and SDPA computes every query against every key of the row: ``T`` = 16k tokens is a
256 MiB mask and 16 times the attention work of 16 sequences of 1k, and SDPA's flash kernel cannot take a mask.
Varlen kernels take the sequence boundaries (``cu_seqlens``) instead and attend within each sequence only.

:func:`enable_varlen_attention` switches a model from ``sdpa`` to :data:`VARLEN_ATTENTION`, an implementation
registered with transformers' attention and mask interfaces that behaves exactly like ``sdpa`` for every call
except a packed one: a call whose keyword arguments carry ``cu_seq_lens_q`` (transformers' name, which flash-attn
models also read) and no mask. Such a call runs, per device:

- CUDA, half precision: flash-attn's ``flash_attn_varlen_func`` when installed, else torch's own
  ``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.10, flash-attention kernels built into torch);
- otherwise (CPU, float32, no kernel): SDPA once per sequence, causal; exact, the reference the tests compare.

The switch is made once per model and stays: the packed call's keyword arguments are what select the varlen path,
so activation checkpointing, which re-runs a layer's forward during backward after the packed call has returned,
recomputes the same attention; and every other call (a padded forward, generation with a cache) still gets sdpa's
mask and kernel. During a packed call (:func:`packed_call`) the mask function builds no mask at all, and a model
that does not hand the sequence boundaries down to its attention is an error rather than a silent cross-sequence
attention.

``VERL_PACKED_ATTENTION`` picks the path of packed forwards: ``auto`` (default) uses varlen attention on CUDA when a
kernel is available and leaves CPU forwards on transformers' block-diagonal mask, as before; ``varlen`` uses it on
every device (the per-sequence reference where there is no kernel); ``mask`` never uses it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import inspect
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "PACKED_ATTENTION_ENV",
    "VARLEN_ATTENTION",
    "enable_varlen_attention",
    "packed_attention_mode",
    "packed_call",
    "varlen_attention",
    "varlen_attention_forward",
    "varlen_kernel_name",
    "wants_varlen",
]

VARLEN_ATTENTION = "verl_varlen"
PACKED_ATTENTION_ENV = "VERL_PACKED_ATTENTION"
_MODES = ("auto", "varlen", "mask")

# True while forward_for_responses runs a packed call that passes the sequence boundaries: no mask is built then.
_PACKED_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("verl_packed_call", default=False)


def packed_attention_mode() -> str:
    """``VERL_PACKED_ATTENTION``: ``auto`` (default), ``varlen`` or ``mask``."""
    mode = os.environ.get(PACKED_ATTENTION_ENV, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise ValueError(f"{PACKED_ATTENTION_ENV}={mode!r}: expected one of {list(_MODES)}")
    return mode


@functools.cache
def _flash_attn_varlen() -> Callable | None:
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception:  # noqa: BLE001 - installed but built for another torch or CUDA (ImportError, OSError, ...)
        return None
    return flash_attn_varlen_func


@functools.cache
def _torch_varlen() -> tuple[Callable, frozenset[str]] | None:
    """torch's ``varlen_attn`` and the names of its parameters (its keywords changed from torch 2.10 to 2.12)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception:  # noqa: BLE001 - absent before torch 2.10; a broken import counts as absent too
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


def varlen_kernel_name(device: torch.device) -> str:
    """The kernel packed attention runs on ``device`` for half-precision inputs: ``flash_attn``, ``torch`` or
    ``reference`` (SDPA per sequence)."""
    if device.type != "cuda":
        return "reference"
    if _flash_attn_varlen() is not None:
        return "flash_attn"
    if _torch_varlen() is not None:
        return "torch"
    return "reference"


def wants_varlen(device: torch.device) -> bool:
    """Whether packed forwards on ``device`` should use varlen attention (see ``VERL_PACKED_ATTENTION``)."""
    mode = packed_attention_mode()
    if mode == "mask":
        return False
    if mode == "varlen":
        return True
    return varlen_kernel_name(device) != "reference"


def _expand_heads(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """``[T, H_kv, D]`` -> ``[T, heads, D]``, each key/value head shared by ``heads // H_kv`` query heads."""
    groups = heads // tensor.shape[1]
    return tensor if groups == 1 else tensor.repeat_interleave(groups, dim=1)


def _torch_varlen_call(
    varlen_attn: Callable,
    params: frozenset[str],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    scale: float | None,
) -> torch.Tensor:
    """Causal ``varlen_attn`` under whichever keywords this torch has: ``is_causal`` (2.10) or
    ``window_size=(-1, 0)`` (2.11+); ``scale`` where taken; ``enable_gqa`` (2.12+), else the key/value heads are
    repeated."""
    kwargs: dict[str, Any] = {}
    if key.shape[1] != query.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            key, value = _expand_heads(key, query.shape[1]), _expand_heads(value, query.shape[1])
    if "is_causal" in params:
        kwargs["is_causal"] = True
    elif "window_size" in params:
        kwargs["window_size"] = (-1, 0)
    else:
        raise RuntimeError("torch.nn.attention.varlen.varlen_attn takes neither is_causal nor window_size")
    default_scale = query.shape[-1] ** -0.5
    if scale is not None and "scale" in params:
        kwargs["scale"] = scale
    elif scale is not None and not math.isclose(scale, default_scale, rel_tol=1e-6):
        query = query * (scale / default_scale)
    return varlen_attn(query, key, value, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **kwargs)


def _reference_varlen(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor, scale: float | None
) -> torch.Tensor:
    """Causal SDPA over each sequence of the packed ``[T, H, D]`` tensors on its own; exact on any device."""
    heads = query.shape[1]
    key, value = _expand_heads(key, heads), _expand_heads(value, heads)
    bounds = cu_seqlens.tolist()
    out = torch.empty_like(query) if bounds[-1] == query.shape[0] else torch.zeros_like(query)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop <= start:
            continue
        q, k, v = (t[start:stop].transpose(0, 1).unsqueeze(0) for t in (query, key, value))
        out[start:stop] = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)[0].transpose(0, 1)
    return out


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal attention within each packed sequence.

    Args:
        query: ``[T, H, D]``; key, value: ``[T, H_kv, D]`` with ``H`` a multiple of ``H_kv`` (grouped queries).
        cu_seqlens: ``[N + 1]`` int32 offsets of the ``N`` sequences in ``T`` (``cu_seqlens[-1] == T``).
        max_seqlen: the longest sequence (a Python int: kernels size their grid by it).
        scale: the softmax scale; default ``D ** -0.5``.

    Returns ``[T, H, D]``, differentiable with respect to ``query``, ``key`` and ``value``.
    """
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16):
        flash = _flash_attn_varlen()
        if flash is not None:
            return flash(
                query, key, value, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale=scale, causal=True
            )
        found = _torch_varlen()
        if found is not None:
            return _torch_varlen_call(found[0], found[1], query, key, value, cu_seqlens, max_seqlen, scale)
    return _reference_varlen(query, key, value, cu_seqlens, scale)


def varlen_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface for :data:`VARLEN_ATTENTION`: ``query`` ``[B, H, S, D]`` and
    key/value ``[B, H_kv, S, D]`` in, ``([B, S, H, D], None)`` out. Varlen for a packed call, sdpa otherwise."""
    cu_seqlens = kwargs.get("cu_seq_lens_q")
    if cu_seqlens is None or attention_mask is not None:
        if _PACKED_CALL.get():
            raise RuntimeError(
                f"{type(module).__name__}: a packed forward reached the attention without cu_seq_lens_q; the model "
                f"must pass its forward's keyword arguments down to the attention (or set {PACKED_ATTENTION_ENV}=mask)"
            )
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed row, got a batch of {query.shape[0]}")
    if kwargs.get("sliding_window") is not None or kwargs.get("softcap") is not None:
        raise ValueError(
            f"{type(module).__name__}: packed varlen attention supports neither sliding windows nor softcap"
        )
    if dropout:
        raise ValueError("packed varlen attention does not support attention dropout (the model is in training mode)")
    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))
    max_seqlen = kwargs.get("max_length_q")
    if max_seqlen is None:
        max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    out = varlen_attention(q, k, v, cu_seqlens, int(max_seqlen), scaling)
    return out.unsqueeze(0), None


def _varlen_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """transformers' mask interface for :data:`VARLEN_ATTENTION`: no mask in a packed call, sdpa's otherwise."""
    if _PACKED_CALL.get():
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **kwargs)


@functools.cache
def _register() -> bool:
    """Register :data:`VARLEN_ATTENTION` with transformers once; False when this transformers has no interfaces."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:
        return False
    AttentionInterface.register(VARLEN_ATTENTION, varlen_attention_forward)
    AttentionMaskInterface.register(VARLEN_ATTENTION, _varlen_mask)
    return True


def _base_model(module: nn.Module) -> nn.Module:
    return module.get_base_model() if callable(getattr(module, "get_base_model", None)) else module


@functools.lru_cache(maxsize=64)
def _passes_keywords(forward: Callable) -> bool:
    """Whether ``forward`` takes ``**kwargs`` (which a transformers model hands down to its attention)."""
    try:
        parameters = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _full_attention_only(config: Any) -> bool:
    """No sliding-window layers (the varlen path attends to whole sequences)."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    if getattr(config, "sliding_window", None) is None:
        return True
    return getattr(config, "use_sliding_window", True) is False


def enable_varlen_attention(module: nn.Module) -> bool:
    """Switch ``module`` (a transformers model, possibly PEFT- or FSDP-wrapped) from ``sdpa`` to
    :data:`VARLEN_ATTENTION`, once; True when its packed forwards can now pass ``cu_seq_lens_q``.

    False, leaving the model as it is, for another attention implementation (eager, flash-attn's own, which already
    handles packed rows), sliding-window layers, attention dropout, or a forward that takes no keyword arguments.
    """
    base = _base_model(module)
    config = getattr(base, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation == VARLEN_ATTENTION:
        return True
    if implementation != "sdpa" or not _full_attention_only(config) or getattr(config, "attention_dropout", 0.0):
        return False
    if not (_passes_keywords(getattr(base.forward, "__func__", base.forward)) and _register()):
        return False
    config._attn_implementation = VARLEN_ATTENTION
    return True


@contextlib.contextmanager
def packed_call() -> Iterator[None]:
    """Mark a packed forward that passes ``cu_seq_lens_q``: the model builds no mask for it."""
    token = _PACKED_CALL.set(True)
    try:
        yield
    finally:
        _PACKED_CALL.reset(token)
