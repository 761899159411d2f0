"""verl.workers.utils.padding: padded <-> no-padding batch layouts, against per-row loop references."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.utils.padding import (
    build_attention_mask_from_nested,
    left_right_2_no_padding,
    no_padding_2_padding,
    response_from_nested,
    response_to_nested,
)


def padded_batch(prompt_len: int = 4, response_len: int = 3) -> TensorDict:
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 50, (3, prompt_len), generator=gen)
    responses = torch.randint(3, 50, (3, response_len), generator=gen)
    attention_mask = torch.ones(3, prompt_len + response_len, dtype=torch.long)
    attention_mask[0, :2] = 0  # left padded prompt
    attention_mask[1, -1] = 0  # short response
    attention_mask[2, -2:] = 0
    return TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "response_mask": attention_mask[:, prompt_len:].clone(),
        },
        batch_size=[3],
    )


def test_left_right_2_no_padding_keeps_real_tokens_per_row():
    data = padded_batch()
    input_ids, mask, positions = data["input_ids"].clone(), data["attention_mask"].bool(), data["position_ids"].clone()
    out = left_right_2_no_padding(data)
    assert out is data and out["input_ids"].is_nested and out["position_ids"].is_nested
    for i, (ids, pos) in enumerate(zip(out["input_ids"].unbind(), out["position_ids"].unbind())):
        assert torch.equal(ids, input_ids[i][mask[i]])
        assert torch.equal(pos, positions[i][mask[i]])
    assert torch.equal(out["loss_mask"], out["response_mask"])
    assert tu.get_non_tensor_data(out, "max_seq_len", None) == 7
    assert tu.get_non_tensor_data(out, "max_response_len", None) == 3
    assert torch.equal(tu.get_non_tensor_data(out, "indices", None), mask.flatten().nonzero().flatten())


def test_left_right_2_no_padding_names_missing_keys():
    data = padded_batch().exclude("response_mask")
    with pytest.raises(KeyError, match="response_mask"):
        left_right_2_no_padding(data)


def test_no_padding_2_padding_picks_the_slots_that_score_each_response_token():
    data = left_right_2_no_padding(padded_batch())
    lengths = data["input_ids"].offsets().diff().tolist()
    flat = torch.arange(sum(lengths), dtype=torch.float32) + 100
    out = no_padding_2_padding(flat, data)
    start, expected = 0, torch.zeros(3, 3)
    for i, length in enumerate(lengths):
        response = int(data["response_mask"][i].sum())
        for j in range(response):  # output at position t scores token t + 1
            expected[i, j] = flat[start + length - response - 1 + j]
        start += length
    assert torch.equal(out, expected)
    nested = torch.nested.nested_tensor_from_jagged(flat, offsets=data["input_ids"].offsets())
    assert torch.equal(no_padding_2_padding(nested, data), expected)


def test_no_padding_2_padding_with_nested_prompts_and_trailing_dims():
    prompts = torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])], layout=torch.jagged)
    responses = torch.nested.nested_tensor([torch.tensor([4]), torch.tensor([5, 6])], layout=torch.jagged)
    data = TensorDict({"prompts": prompts, "responses": responses}, batch_size=[2])
    values = torch.arange(6, dtype=torch.float32).unsqueeze(-1).repeat(1, 2)  # [T, 2]
    out = no_padding_2_padding(values, data)
    assert out.shape == (2, 2, 2)
    assert torch.equal(out[0, :, 0], torch.tensor([1.0, 0.0]))  # sample 0: tokens 0..2, response scored at 1
    assert torch.equal(out[1, :, 0], torch.tensor([3.0, 4.0]))  # sample 1: tokens 3..5, responses at 3, 4


def test_no_padding_2_padding_checks_token_count():
    data = left_right_2_no_padding(padded_batch())
    with pytest.raises(ValueError, match="tokens"):
        no_padding_2_padding(torch.zeros(3), data)


def test_nested_response_helpers():
    ids = torch.nested.nested_tensor([torch.arange(4), torch.arange(10, 13)], layout=torch.jagged)
    assert build_attention_mask_from_nested(ids).tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert build_attention_mask_from_nested(ids, 5).shape == (2, 5)
    response_mask = torch.nested.nested_tensor([torch.ones(2), torch.ones(1)], layout=torch.jagged)
    picked = response_from_nested(ids, response_mask)
    assert [row.tolist() for row in picked.unbind()] == [[1, 2], [11]]
    padded = torch.tensor([[7, 8], [9, 0]])
    assert [row.tolist() for row in response_to_nested(padded, response_mask).unbind()] == [[7, 8], [9]]
