"""A micro-batch as the actor's forward receives it, shared by the actor tests that compare two forward paths."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.utils.torch_functional import compute_position_id_with_mask


def response_micro_batch(vocab_size: int, rows: int, prompt_len: int, response_len: int) -> TensorDict:
    """Random prompts and responses; row 0 has a left-padded prompt and row 1 a response two tokens short."""
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, vocab_size, (rows, prompt_len), generator=gen)
    responses = torch.randint(1, vocab_size, (rows, response_len), generator=gen)
    attention_mask = torch.ones(rows, prompt_len + response_len, dtype=torch.long)
    attention_mask[0, :2] = 0  # a left-padded prompt
    attention_mask[1, -2:] = 0  # a short response
    return TensorDict(
        {
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
        },
        batch_size=[rows],
    )
