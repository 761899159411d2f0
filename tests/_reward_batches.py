"""Rollout-shaped batches for the reward-loop tests: left-padded prompts, right-padded responses ending in <eos>."""

import torch

from verl import DataProto
from verl.utils.torch_functional import pad_2d_list_to_length

PROMPT_LEN, RESPONSE_LEN = 8, 10


def make_batch(tokenizer, responses, ground_truths, data_source="synthetic/addition", extra=None):
    n = len(responses)
    prompt_rows = [tokenizer(f"{i}+1=", add_special_tokens=False)["input_ids"] for i in range(n)]
    response_rows = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    pad = tokenizer.pad_token_id
    prompts = pad_2d_list_to_length(prompt_rows, pad, PROMPT_LEN, left_pad=True)
    resp = pad_2d_list_to_length(response_rows, pad, RESPONSE_LEN)
    prompt_mask = pad_2d_list_to_length([[1] * len(r) for r in prompt_rows], 0, PROMPT_LEN, left_pad=True)
    resp_mask = pad_2d_list_to_length([[1] * len(r) for r in response_rows], 0, RESPONSE_LEN)
    non_tensors = {
        "data_source": [data_source] * n,
        "reward_model": [{"ground_truth": gt, "style": "rule"} for gt in ground_truths],
        "extra_info": [{"index": i} for i in range(n)],
    }
    non_tensors.update(extra or {})
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": resp,
            "input_ids": torch.cat([prompts, resp], dim=1),
            "attention_mask": torch.cat([prompt_mask, resp_mask], dim=1),
        },
        non_tensors=non_tensors,
    )


def last_positions(data):
    return (data.batch["attention_mask"][:, PROMPT_LEN:].sum(-1) - 1).tolist()


def scores_at_last_token(reward_tensor, data):
    """The value at each row's last response token, after checking every other position is 0."""
    values = []
    for i, pos in enumerate(last_positions(data)):
        others = torch.cat([reward_tensor[i, :pos], reward_tensor[i, pos + 1 :]])
        assert (others == 0).all(), f"row {i} has non-zero reward off its last token"
        values.append(reward_tensor[i, pos].item())
    return values
