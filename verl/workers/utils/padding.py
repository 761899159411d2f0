"""Convert a batch between verl's padded layout and the no-padding (jagged) layout the model engines take.

Padded layout: ``input_ids`` / ``attention_mask`` / ``position_ids`` ``[B, S]`` (prompt left padded, response
right padded), ``response_mask`` ``[B, R]``. No-padding layout: ``input_ids`` and ``position_ids`` as jagged nested
tensors holding each sample's real tokens only, ``loss_mask`` (the response mask), and batch-wide ``max_seq_len``,
``max_response_len`` and ``indices`` (where the real tokens sat in the flattened ``[B * S]`` grid).

An engine's per-token output for a no-padding batch covers prompt and response tokens back to back;
:func:`no_padding_2_padding` cuts each sample's response slots out of it (the output at position ``t`` scores token
``t + 1``, so a response of length ``r`` ending at packed offset ``e`` is scored by ``[e - r - 1, e - 1)``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.nested_tensors import nested_rows, nested_tensor_from_tensor_list
from verl.utils.padding import index_first_axis, unpad_input

__all__ = [
    "build_attention_mask_from_nested",
    "left_right_2_no_padding",
    "no_padding_2_padding",
    "response_from_nested",
    "response_to_nested",
]

_PADDED_KEYS = ("input_ids", "attention_mask", "response_mask", "position_ids")


def _jagged(flat: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor_from_jagged(flat, offsets=cu_seqlens.to(torch.long))


def left_right_2_no_padding(data: TensorDict) -> TensorDict:
    """Turn a padded batch into the no-padding layout, in place, and return it.

    ``input_ids`` and ``position_ids`` (``[B, S]``, or ``[B, 4, S]`` mRoPE rows) become jagged; ``loss_mask`` is
    set to ``response_mask``; ``attention_mask``, ``response_mask`` and every other key are kept as they are.
    ``routed_experts`` ``[B, S, ...]`` and ``teacher_logprobs`` / ``teacher_ids`` ``[B, S, K]``, when present, are
    packed like ``input_ids``.
    """
    missing = [key for key in _PADDED_KEYS if key not in data.keys()]
    if missing:
        raise KeyError(f"left_right_2_no_padding needs keys {missing}; the batch has {sorted(data.keys())}")
    input_ids = data.get("input_ids")
    if input_ids.is_nested:
        raise ValueError("left_right_2_no_padding: input_ids is already a nested (no-padding) tensor")
    attention_mask = data.get("attention_mask")
    position_ids = data.get("position_ids")
    packed, indices, cu_seqlens, _ = unpad_input(input_ids.unsqueeze(-1), attention_mask)
    keep = attention_mask.bool()
    if position_ids.dim() == 3:  # [B, 4, S]: keep each row's (4, len) block
        rows = [position_ids[i][:, keep[i]] for i in range(position_ids.shape[0])]
    else:
        rows = [position_ids[i][keep[i]] for i in range(position_ids.shape[0])]
    data.set("input_ids", _jagged(packed.squeeze(-1), cu_seqlens))
    data.set("position_ids", nested_tensor_from_tensor_list(rows))
    data.set("loss_mask", data.get("response_mask"))
    for key in ("routed_experts", "teacher_logprobs", "teacher_ids"):
        value = data.get(key, None)
        if isinstance(value, torch.Tensor) and not value.is_nested:
            flat = index_first_axis(value.reshape(-1, *value.shape[2:]), indices)
            data.set(key, _jagged(flat, cu_seqlens))
    tu.assign_non_tensor_data(data, "max_seq_len", int(input_ids.shape[1]))
    tu.assign_non_tensor_data(data, "max_response_len", int(data.get("response_mask").shape[1]))
    tu.assign_non_tensor_data(data, "indices", indices)
    return data


def _prompt_and_response_lengths(data: TensorDict) -> tuple[torch.Tensor, torch.Tensor, int]:
    prompts, responses = data.get("prompts"), data.get("responses")
    if prompts.is_nested:
        prompt_lens = prompts.offsets().diff()
        response_lens = responses.offsets().diff()
        width = int(tu.get_non_tensor_data(data, "max_response_len", -1))
        if width < 0:
            width = int(response_lens.max().item()) if response_lens.numel() else 0
        return prompt_lens, response_lens, width
    attention_mask = data.get("attention_mask")
    if attention_mask.is_nested:
        raise ValueError("no_padding_2_padding: padded prompts need a padded attention_mask")
    prompt_width = prompts.shape[1]
    prompt_lens = attention_mask[:, :prompt_width].sum(dim=1)
    response_lens = attention_mask[:, prompt_width:].sum(dim=1)
    return prompt_lens, response_lens, int(responses.shape[1])


def no_padding_2_padding(tensor: torch.Tensor, data: TensorDict) -> torch.Tensor:
    """``[B, max_response_len, ...]`` response slots of a per-token engine output, zero past each response's end.

    ``tensor`` is a jagged nested tensor or its flat ``values()`` (``[T, ...]``, every real token of the batch
    back to back). ``data`` supplies the lengths: ``prompts`` / ``responses`` (padded, with ``attention_mask``; or
    nested).
    """
    values = tensor.values() if tensor.is_nested else tensor
    prompt_lens, response_lens, width = _prompt_and_response_lengths(data)
    prompt_lens = prompt_lens.to(values.device, torch.long)
    response_lens = response_lens.to(values.device, torch.long)
    ends = torch.cumsum(prompt_lens + response_lens, dim=0)
    if ends.numel() and int(ends[-1].item()) != values.shape[0]:
        raise ValueError(
            f"no_padding_2_padding: the output has {values.shape[0]} tokens but prompts + responses "
            f"of the batch have {int(ends[-1].item())}"
        )
    if bool((prompt_lens == 0).any()):
        raise ValueError(
            "no_padding_2_padding: every sample needs at least one prompt token (the first response "
            "token is scored by the last prompt position)"
        )
    steps = torch.arange(width, device=values.device)
    valid = steps.unsqueeze(0) < response_lens.unsqueeze(1)  # [B, W]
    index = (ends - response_lens - 1).unsqueeze(1) + steps.unsqueeze(0)
    index = torch.where(valid, index, torch.zeros_like(index))
    picked = values[index.reshape(-1)].reshape(*index.shape, *values.shape[1:])
    mask = valid.reshape(*valid.shape, *([1] * (values.dim() - 1)))
    return picked * mask.to(picked.dtype) if picked.is_floating_point() else picked.masked_fill(~mask, 0)


def build_attention_mask_from_nested(input_ids: torch.Tensor, max_seq_len: int | None = None) -> torch.Tensor:
    """``[B, max_seq_len]`` int32 mask, ones over each row's real tokens (left aligned), from jagged ``input_ids``."""
    if not input_ids.is_nested:
        raise ValueError("build_attention_mask_from_nested: input_ids must be a nested tensor")
    lengths = input_ids.offsets().diff().to(input_ids.values().device)
    width = int(lengths.max().item()) if max_seq_len is None else int(max_seq_len)
    return (torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int32)


def response_from_nested(tensor: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Jagged per-sample response slots of a jagged per-token output (lengths from a jagged ``response_mask``)."""
    response_lens = response_mask.offsets().diff().tolist()
    rows = nested_rows(tensor)
    return nested_tensor_from_tensor_list(
        [row[len(row) - r - 1 : len(row) - 1] for row, r in zip(rows, response_lens, strict=True)]
    )


def response_to_nested(tensor: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A padded ``[B, R]`` response tensor as jagged rows of each sample's response length."""
    if not response_mask.is_nested:
        raise ValueError("response_to_nested: response_mask must be a nested tensor")
    response_lens = response_mask.offsets().diff().tolist()
    return nested_tensor_from_tensor_list([tensor[i, :r] for i, r in enumerate(response_lens)])
