"""verl's padding helpers for packed ("remove padding") forwards under flash-attn's names.

``index_first_axis``, ``pad_input``, ``unpad_input`` and ``rearrange`` are what model code imports from
``flash_attn.bert_padding``. When flash-attn is installed its kernels are used; otherwise the plain-torch versions in
:mod:`verl.utils.padding` (and a small ``rearrange``, or einops' when installed) do the same job, so the code runs on
CPU-only machines too. ``unpad_input`` returns flash-attn's (>= 2.7) five values either way.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from verl.utils import padding

__all__ = ["index_first_axis", "pad_input", "rearrange", "unpad_input"]


def _unpad_input(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Keep the tokens of ``attention_mask`` (and of ``unused_mask``, tokens kept but not counted as used).

    Returns ``(tokens [T, ...], indices [T], cu_seqlens [B+1] int32, max_seqlen, used_seqlens [B] int32)``.
    """
    used = attention_mask.to(torch.int32)
    kept = used + unused_mask.to(torch.int32) if unused_mask is not None else used
    tokens, indices, cu_seqlens, max_seqlen = padding.unpad_input(hidden_states, kept)
    return tokens, indices, cu_seqlens, max_seqlen, used.sum(dim=-1, dtype=torch.int32)


_AXIS = re.compile(r"\(|\)|\.\.\.|[A-Za-z_][A-Za-z0-9_]*|\d+")


def _parse_side(side: str, where: str) -> list[list[str] | None]:
    """Groups of axis names; ``None`` stands for ``...``; ``1`` is a unit axis; ``()`` an empty (size-1) group."""
    tokens = _AXIS.findall(side)
    if "".join(tokens) != re.sub(r"\s+", "", side):
        raise ValueError(f"rearrange: cannot parse the {where} side {side!r}")
    groups: list[list[str] | None] = []
    open_group: list[str] | None = None
    for token in tokens:
        if token == "(":
            if open_group is not None:
                raise ValueError(f"rearrange: nested parentheses in {side!r}")
            open_group = []
        elif token == ")":
            if open_group is None:
                raise ValueError(f"rearrange: unbalanced ')' in {side!r}")
            groups.append(open_group)
            open_group = None
        elif token == "...":
            if open_group is not None:
                raise ValueError(f"rearrange: '...' inside parentheses is not supported ({side!r})")
            groups.append(None)
        elif token.isdigit() and token != "1":
            raise ValueError(f"rearrange: only the unit axis 1 may be a number, got {token!r} in {side!r}")
        elif open_group is not None:
            open_group.append(token)
        else:
            groups.append([token])
    if open_group is not None:
        raise ValueError(f"rearrange: unbalanced '(' in {side!r}")
    return groups


def _expand_ellipsis(groups: list[list[str] | None], count: int) -> list[list[str]]:
    out: list[list[str]] = []
    for group in groups:
        out.extend([[f"...{i}"] for i in range(count)] if group is None else [group])
    return out


def _torch_rearrange(tensor: torch.Tensor, pattern: str, **axes_lengths: int) -> torch.Tensor:
    """einops-style axis reordering, splitting and merging (``"b s ... -> (b s) ..."``) with reshape and permute."""
    left_text, arrow, right_text = pattern.partition("->")
    if not arrow:
        raise ValueError(f"rearrange: pattern {pattern!r} has no '->'")
    left, right = _parse_side(left_text, "left"), _parse_side(right_text, "right")
    fixed = sum(1 for group in left if group is not None)
    if (None in left) != (None in right) or left.count(None) > 1:
        raise ValueError(f"rearrange: '...' must appear once on both sides or on neither ({pattern!r})")
    spare = tensor.dim() - fixed
    if spare < 0 or (spare and None not in left):
        raise ValueError(f"rearrange: pattern {pattern!r} names {fixed} dims, the tensor has {tensor.dim()}")
    left_groups, right_groups = _expand_ellipsis(left, spare), _expand_ellipsis(right, spare)
    sizes: dict[str, int] = {"1": 1, **{name: int(value) for name, value in axes_lengths.items()}}
    for group, dim in zip(left_groups, tensor.shape):
        unknown = [name for name in group if name not in sizes]
        known = math.prod(sizes[name] for name in group if name in sizes)
        if len(unknown) > 1:
            raise ValueError(f"rearrange: cannot infer sizes of {unknown} in {pattern!r}; pass them as keywords")
        if unknown:
            if known == 0 or dim % known:
                raise ValueError(f"rearrange: dim of size {dim} is not divisible into group {group}")
            sizes[unknown[0]] = dim // known
        elif known != dim:
            raise ValueError(f"rearrange: group {group} has size {known}, the tensor dim has {dim}")
    elementary = [name for group in left_groups for name in group if name != "1"]
    target = [name for group in right_groups for name in group if name != "1"]
    if sorted(elementary) != sorted(target) or len(set(elementary)) != len(elementary):
        raise ValueError(f"rearrange: both sides of {pattern!r} must name the same axes once each")
    split = tensor.reshape([sizes[name] for name in elementary]) if elementary else tensor.reshape(())
    moved = split.permute([elementary.index(name) for name in target]) if target else split
    return moved.reshape([math.prod(sizes[name] for name in group) for group in right_groups])


@functools.cache
def _functions() -> Mapping[str, Callable[..., Any]]:
    if importlib.util.find_spec("flash_attn") is not None:
        from flash_attn import bert_padding

        return {
            "index_first_axis": bert_padding.index_first_axis,
            "pad_input": bert_padding.pad_input,
            "unpad_input": bert_padding.unpad_input,
            "rearrange": bert_padding.rearrange,
        }
    chosen: dict[str, Callable[..., Any]] = {
        "index_first_axis": padding.index_first_axis,
        "pad_input": padding.pad_input,
        "unpad_input": _unpad_input,
        "rearrange": _torch_rearrange,
    }
    if importlib.util.find_spec("einops") is not None:
        import einops

        chosen["rearrange"] = einops.rearrange
    return chosen


def index_first_axis(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows ``indices`` of a ``[B*S, ...]`` tensor (differentiable)."""
    return _functions()["index_first_axis"](tensor, indices)


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Scatter packed ``[T, ...]`` tokens back to ``[batch, seqlen, ...]``, zeros at the pads."""
    return _functions()["pad_input"](hidden_states, indices, batch, seqlen)


def unpad_input(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Pack ``[B, S, ...]`` to the real tokens: ``(tokens, indices, cu_seqlens, max_seqlen, used_seqlens)``."""
    return _functions()["unpad_input"](hidden_states, attention_mask, unused_mask)


def rearrange(tensor: torch.Tensor, pattern: str, **axes_lengths: int) -> torch.Tensor:
    """einops' ``rearrange`` (reorder, split and merge axes by a pattern such as ``"b s ... -> (b s) ..."``)."""
    return _functions()["rearrange"](tensor, pattern, **axes_lengths)
