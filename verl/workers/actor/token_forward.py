"""Run a Hugging Face model over a batch and pick out the slots that score the response.

For a sequence ``prompt (P, left padded) + response (R, right padded)`` the
output at position ``t`` predicts token ``t + 1``, so the response is scored by
positions ``P - 1 .. P + R - 2`` (``[-R-1:-1]`` of the padded layout).

Padding removal packs every real token of the micro-batch into one row and
passes ``position_ids`` that restart at 0 for each sequence with no attention
mask. Transformers (5.x) then builds a block-diagonal causal mask from the
position restarts for the ``sdpa`` and ``eager`` kernels on any device, and
``flash_attention_2`` reads the same restarts as varlen boundaries, so the
same call serves a laptop CPU and a GPU node. Packing skips the compute on
padding; the result equals the padded forward on every real token. On a GPU
an ``sdpa`` model is switched to varlen attention instead
(:mod:`verl.utils.varlen_attention`): the sequence boundaries are passed down
as ``cu_seq_lens_q`` and each sequence attends only to itself, with no
``[T, T]`` mask (``VERL_PACKED_ATTENTION`` picks the path).

Without packing, the columns that are left padding in every row of the
micro-batch are cut off before the forward: no token attends to them and no
response slot reads them, so the result is the same while prompts padded to
``data.max_prompt_length`` cost only as much as the longest prompt present.

Either way, response columns that are padding in every row of the micro-batch (past its longest response) are
cut off before the forward and their outputs restored as zeros afterwards (``trim_response_padding``): a micro-batch
of short answers costs what its own answers cost, not ``data.max_response_length``.

A model whose forward takes ``logits_to_keep`` (every Hugging Face causal LM)
runs its output head on the response slots only, in either layout: the logits
of prompt positions, [B, S, vocab] of memory and an LM-head matmul per token,
are never made. Other modules (a critic's value head) output every position.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
from tensordict import TensorDict
from torch import nn

from verl.utils.device import get_device_id
from verl.utils.padding import index_first_axis, unpad_input
from verl.utils.varlen_attention import enable_varlen_attention, packed_call, wants_varlen

__all__ = [
    "ResponseSlots",
    "forward_for_responses",
    "keeps_selected_logits",
    "module_device",
    "pad_response_columns",
    "shared_left_padding",
    "trim_response_padding",
]


@dataclass(frozen=True)
class ResponseSlots:
    """Where the outputs that score each response token live in the flattened model output.

    ``index`` ([B, R]) points into the token axis of the flat output, or is ``None`` when the flat output holds
    exactly the slots, row by row (the model kept only those logits); ``valid`` ([B, R], or ``None`` when every
    slot exists) is false where the slot is a padding position that the packed forward never computed.
    """

    index: torch.Tensor | None
    valid: torch.Tensor | None
    shape: tuple[int, int]

    def take(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat`` [T, ...] -> [B, R, ...]; values at invalid slots are arbitrary until :meth:`clean`."""
        if self.index is None:
            return flat.reshape(*self.shape, *flat.shape[1:])
        return flat[self.index]

    def clean(self, per_slot: torch.Tensor) -> torch.Tensor:
        """Zero the invalid slots of a [B, R] result so both layouts agree on padding."""
        if self.valid is None:
            return per_slot
        return per_slot.masked_fill(~self.valid, 0.0)


def module_device(module: nn.Module) -> torch.device:
    """Where the module computes, hence where its inputs go.

    Sharded (FSDP2) parameters are DTensors whose mesh names the compute device even
    while their storage is offloaded to CPU between steps.
    """
    param = next(module.parameters(), None)
    if param is None:
        return torch.device("cpu")
    mesh = getattr(param, "device_mesh", None)
    if mesh is not None and mesh.device_type != "cpu":
        return torch.device(mesh.device_type, get_device_id())
    return param.device


def _model_output(output) -> torch.Tensor:
    return output.logits if hasattr(output, "logits") else output[0]


def keeps_selected_logits(module: nn.Module) -> bool:
    """Whether ``module``'s forward takes ``logits_to_keep`` (through a PEFT wrapper, its base model's does)."""
    base = module.get_base_model() if callable(getattr(module, "get_base_model", None)) else module
    return _takes_logits_to_keep(getattr(base.forward, "__func__", base.forward))


@functools.lru_cache(maxsize=64)
def _takes_logits_to_keep(forward) -> bool:
    """Cached per forward function: the check runs once per micro-batch of every update."""
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def _forward_slots(
    module: nn.Module, inputs: dict, kept: torch.Tensor, index: torch.Tensor, valid: torch.Tensor | None
) -> tuple[torch.Tensor, ResponseSlots]:
    """Run ``module`` on ``inputs``; the flat output and the slots into it.

    ``index`` [B, R] locates the slots in the full flat output; ``kept`` names the same slots, in slot order, along
    the output's token axis, which is what ``logits_to_keep`` selects, so a model that takes it outputs the slots
    alone and ``take`` only reshapes.
    """
    shape = (index.shape[0], index.shape[1])
    if not keeps_selected_logits(module):
        return _model_output(module(**inputs)).flatten(0, 1), ResponseSlots(index, valid, shape)
    output = _model_output(module(**inputs, logits_to_keep=kept))
    if output.shape[1] != kept.numel():
        raise ValueError(
            f"{type(module).__name__} takes logits_to_keep but returned {output.shape[1]} positions where "
            f"{kept.numel()} were kept; its forward must apply logits_to_keep to its output head"
        )
    return output.flatten(0, 1), ResponseSlots(None, valid, shape)


def _check_packable(positions: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    """Packed attention finds sequence boundaries where positions do not step by +1; they must be exactly ours."""
    starts = torch.zeros_like(positions, dtype=torch.bool)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    starts[cu_seqlens[:-1][lengths > 0].long()] = True
    steps = torch.ones_like(starts)
    steps[1:] = (positions[1:] - positions[:-1]) != 1
    if not torch.equal(steps, starts):
        raise ValueError(
            "use_remove_padding needs position_ids that start each sequence at a value not following the previous "
            "sequence and increase by 1 over its real tokens (as compute_position_id_with_mask produces); "
            "disable use_remove_padding for these inputs"
        )


def shared_left_padding(attention_mask: torch.Tensor, response_length: int) -> int:
    """How many leading columns are padding in every row (at most all but the last ``response_length + 1``)."""
    seqlen = attention_mask.shape[-1]
    used = attention_mask.bool().any(dim=0)
    first = int(used.to(torch.int8).argmax()) if bool(used.any()) else seqlen
    return max(0, min(first, seqlen - response_length - 1))


def trim_response_padding(micro: TensorDict) -> tuple[TensorDict, int]:
    """``micro`` without the trailing response columns that are padding in every row, and how many were cut.

    Only the forward's inputs (input ids, attention mask, position ids, responses) are cut; at least one response
    column stays. The returned micro-batch shares storage with ``micro``.
    """
    responses = micro["responses"]
    response_length = responses.shape[-1]
    response_mask = micro["attention_mask"][:, -response_length:].bool()
    used_columns = response_mask.any(dim=0).nonzero()  # one read-back from the device
    longest = int(used_columns[-1]) + 1 if len(used_columns) else 1
    cut = response_length - longest
    if cut <= 0:
        return micro, 0
    trimmed = micro.copy()
    for key in ("input_ids", "attention_mask"):
        trimmed.set(key, micro[key][:, :-cut])
    trimmed.set("position_ids", micro["position_ids"][..., :-cut])
    trimmed.set("responses", responses[:, :-cut])
    return trimmed, cut


def pad_response_columns(per_slot: torch.Tensor | None, cut: int) -> torch.Tensor | None:
    """Give a [B, R - cut] per-slot result its ``cut`` trimmed padding columns back, as zeros."""
    if per_slot is None or cut == 0:
        return per_slot
    return torch.nn.functional.pad(per_slot, (0, cut))


def _response_columns(seqlen: int, response_length: int, device: torch.device) -> torch.Tensor:
    """[R] positions of a padded row whose outputs score its response tokens."""
    return torch.arange(seqlen - response_length - 1, seqlen - 1, device=device)


def _response_index(batch_size: int, seqlen: int, response_length: int, device: torch.device) -> torch.Tensor:
    """[B, R] positions, in the flattened [B * S] padded layout, of the outputs that score each response token."""
    columns = _response_columns(seqlen, response_length, device)
    return torch.arange(batch_size, device=device)[:, None] * seqlen + columns[None, :]


def forward_for_responses(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    remove_padding: bool,
) -> tuple[torch.Tensor, ResponseSlots]:
    """Forward ``module`` and return its flat per-token output ([T, ...]) and the response slots into it."""
    batch_size, seqlen = input_ids.shape
    if response_length <= 0 or response_length >= seqlen:
        raise ValueError(f"responses length {response_length} must be in [1, {seqlen - 1}] for input_ids of {seqlen}")

    if not remove_padding:
        cut = shared_left_padding(attention_mask, response_length)
        if cut:
            input_ids, attention_mask = input_ids[:, cut:], attention_mask[:, cut:]
            position_ids = position_ids[..., cut:]
            seqlen -= cut
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "use_cache": False,
        }
        device = input_ids.device
        return _forward_slots(
            module,
            inputs,
            _response_columns(seqlen, response_length, device),
            _response_index(batch_size, seqlen, response_length, device),
            None,
        )

    padded_index = _response_index(batch_size, seqlen, response_length, input_ids.device)
    if position_ids.dim() != 2:
        raise ValueError(f"use_remove_padding supports position_ids of shape [B, S], got {tuple(position_ids.shape)}")
    packed_ids, token_index, cu_seqlens, max_seqlen = unpad_input(input_ids.unsqueeze(-1), attention_mask)
    packed_positions = index_first_axis(position_ids.reshape(-1, 1), token_index)
    packed_ids, packed_positions = packed_ids.reshape(1, -1), packed_positions.reshape(1, -1)
    _check_packable(packed_positions[0], cu_seqlens)
    real = attention_mask.reshape(-1).bool()
    packed_of_padded = torch.cumsum(real.long(), 0) - 1
    index = packed_of_padded[padded_index].clamp(min=0)
    inputs = {"input_ids": packed_ids, "position_ids": packed_positions, "attention_mask": None, "use_cache": False}
    # an invalid slot (padding) reads some real position until clean()
    if not (wants_varlen(input_ids.device) and enable_varlen_attention(module)):
        return _forward_slots(module, inputs, index.reshape(-1), index, real[padded_index])
    # the sequence boundaries go down to the attention, which attends within each sequence (varlen_attention)
    inputs.update(cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens, max_length_q=max_seqlen, max_length_k=max_seqlen)
    with packed_call():
        return _forward_slots(module, inputs, index.reshape(-1), index, real[padded_index])
