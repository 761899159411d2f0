"""verl.utils.attention_utils without flash-attn: flash-attn's five-value unpad_input and an einops-style
rearrange in plain torch."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl.utils import attention_utils
from verl.utils.attention_utils import _torch_rearrange, index_first_axis, pad_input, rearrange, unpad_input

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flash_attn") is not None, reason="flash-attn's own kernels are used when it is installed"
)


def test_unpad_returns_flash_attn_five_values_and_pads_back():
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]])
    hidden = torch.randn(2, 4, 3)
    tokens, indices, cu_seqlens, max_seqlen, used = unpad_input(hidden, mask)
    assert indices.tolist() == [1, 2, 3, 4, 5]
    assert cu_seqlens.tolist() == [0, 3, 5] and max_seqlen == 3 and used.tolist() == [3, 2]
    assert torch.equal(tokens, hidden.reshape(8, 3)[indices])
    assert torch.equal(index_first_axis(hidden.reshape(8, 3), indices), tokens)
    back = pad_input(tokens, indices, batch=2, seqlen=4)
    assert torch.equal(back * mask.unsqueeze(-1), hidden * mask.unsqueeze(-1))


def test_unused_tokens_are_kept_but_not_counted_as_used():
    mask = torch.tensor([[1, 1, 0, 0]])
    unused = torch.tensor([[0, 0, 1, 0]])
    tokens, indices, cu_seqlens, max_seqlen, used = unpad_input(torch.randn(1, 4, 2), mask, unused)
    assert indices.tolist() == [0, 1, 2] and cu_seqlens.tolist() == [0, 3] and used.tolist() == [2]


@pytest.mark.parametrize(
    ("pattern", "lengths", "expected"),
    [
        ("b s ... -> (b s) ...", {}, lambda x: x.reshape(6, 4)),
        ("b s d -> d b s", {}, lambda x: x.permute(2, 0, 1)),
        ("b s (h d) -> b s h d", {"h": 2}, lambda x: x.reshape(2, 3, 2, 2)),
        ("b s d -> b 1 s d", {}, lambda x: x.unsqueeze(1)),
        ("b ... -> ... b", {}, lambda x: x.permute(1, 2, 0)),
        ("b s d -> b (s d)", {}, lambda x: x.reshape(2, 12)),
    ],
)
def test_rearrange_patterns(pattern, lengths, expected):
    x = torch.arange(24).reshape(2, 3, 4)
    assert torch.equal(rearrange(x, pattern, **lengths), expected(x))
    assert torch.equal(_torch_rearrange(x, pattern, **lengths), expected(x))


def test_rearrange_splits_a_merged_axis_back():
    y = torch.randn(6, 5)
    assert torch.equal(_torch_rearrange(y, "(b s) d -> b s d", b=2), y.reshape(2, 3, 5))


@pytest.mark.parametrize(
    ("pattern", "lengths", "message"),
    [
        ("b s d", {}, "no '->'"),
        ("b s -> b s", {}, "names 2 dims, the tensor has 3"),
        ("b s d -> b s", {}, "same axes"),
        ("b s (h d) -> b s h d", {}, "cannot infer"),
        ("b s (h d) -> b s h d", {"h": 3}, "not divisible"),
    ],
)
def test_rearrange_errors_name_the_problem(pattern, lengths, message):
    with pytest.raises(ValueError, match=message):
        _torch_rearrange(torch.zeros(2, 3, 4), pattern, **lengths)


def test_plain_torch_functions_are_chosen_without_flash_attn():
    chosen = attention_utils._functions()
    assert chosen["unpad_input"] is attention_utils._unpad_input
