"""Padding removal for packed ("remove padding") forward passes, in plain torch.

A padded batch ``[B, S, ...]`` wastes compute on pad tokens; packing keeps only the
``T`` real tokens as ``[T, ...]`` plus ``cu_seqlens`` marking where each sequence
starts. These helpers mirror the ``flash_attn.bert_padding`` names so actor code can
pack and unpack without flash-attn being installed (e.g. on CPU).
"""

from __future__ import annotations

import torch

__all__ = ["index_first_axis", "unpad_input", "pad_input"]


def index_first_axis(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows ``indices`` of a flat ``[B*S, ...]`` tensor: ``[B*S, ...] -> [len(indices), ...]``.

    Differentiable: the backward pass scatters the gradient into zeros at the other rows.
    """
    if x.dim() < 1:
        raise ValueError("index_first_axis needs a tensor with at least one dim")
    if indices.dim() != 1:
        raise ValueError(f"index_first_axis: indices must be 1-D, got shape {tuple(indices.shape)}")
    return x.index_select(0, indices)


def unpad_input(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Drop padding from ``hidden_states [B, S, ...]`` using ``attention_mask [B, S]`` (1 = real token).

    Returns:
        unpadded ``[T, ...]`` real tokens in row-major order, ``indices [T]`` (int64) of those tokens in
        the flattened ``B*S`` grid, ``cu_seqlens [B+1]`` (int32) cumulative lengths starting at 0, and
        ``max_seqlen`` the longest sequence (python int).
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"unpad_input: attention_mask must be [batch, seqlen], got {tuple(attention_mask.shape)}")
    if tuple(hidden_states.shape[:2]) != tuple(attention_mask.shape):
        raise ValueError(
            f"unpad_input: hidden_states leading dims {tuple(hidden_states.shape[:2])} must match "
            f"attention_mask shape {tuple(attention_mask.shape)}"
        )
    keep = attention_mask.bool()
    seqlens = keep.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(keep.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    cu_seqlens = _cu_seqlens(seqlens)
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen


def _cu_seqlens(seqlens: torch.Tensor) -> torch.Tensor:
    """``[0, l0, l0+l1, ...]`` as int32, the layout varlen attention kernels expect."""
    zero = torch.zeros(1, dtype=torch.int32, device=seqlens.device)
    return torch.cat([zero, torch.cumsum(seqlens, dim=0, dtype=torch.int32)])


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of :func:`unpad_input`: scatter ``[T, ...]`` back to ``[batch, seqlen, ...]`` with zeros at pads."""
    if indices.dim() != 1 or indices.shape[0] != hidden_states.shape[0]:
        raise ValueError(
            f"pad_input: indices shape {tuple(indices.shape)} must be [T] with T = hidden_states.shape[0] = "
            f"{hidden_states.shape[0]}"
        )
    if indices.numel() and int(indices.max().item()) >= batch * seqlen:
        raise ValueError(
            f"pad_input: index {int(indices.max().item())} is out of range for batch={batch} x seqlen={seqlen}"
        )
    out = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    out = out.index_copy(0, indices, hidden_states)
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
