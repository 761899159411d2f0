"""trainer.rollout_data_dir / validation_data_dir: one JSON line per sample, read back as written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from verl.protocol import DataProto
from verl.trainer.ppo.generation_dump import dump_generations


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _batch(tokenizer, prompts: list[str], responses: list[str], width_p: int = 8, width_r: int = 6) -> DataProto:
    pad = tokenizer.pad_token_id
    rows = len(prompts)
    prompt_ids = torch.full((rows, width_p), pad)
    response_ids = torch.full((rows, width_r), pad)
    attention = torch.zeros(rows, width_p + width_r, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        p_ids, r_ids = tokenizer.encode(p), tokenizer.encode(r)
        prompt_ids[i, width_p - len(p_ids) :] = torch.tensor(p_ids)
        response_ids[i, : len(r_ids)] = torch.tensor(r_ids)
        attention[i, width_p - len(p_ids) : width_p + len(r_ids)] = 1
    messages = np.empty(rows, dtype=object)
    messages[:] = [[{"role": "user", "content": p}] for p in prompts]
    return DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": attention},
        non_tensors={
            "uid": np.array(["a", "b"], dtype=object),
            "acc": np.array([True, False], dtype=object),
            "index": np.array([3, 4]),
            "raw_prompt": messages,
        },
    )


def test_each_sample_is_one_line_without_padding(tokenizer, tmp_path):
    batch = _batch(tokenizer, ["1+2=", "9+9="], ["3", "18"])
    path = dump_generations(tmp_path / "rollouts", 7, tokenizer, batch, torch.tensor([1.0, 0.0]))
    assert path == tmp_path / "rollouts" / "7.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records == [
        {"step": 7, "input": "1+2=", "output": "3", "score": 1.0, "uid": "a", "acc": True, "index": 3},
        {"step": 7, "input": "9+9=", "output": "18", "score": 0.0, "uid": "b", "acc": False, "index": 4},
    ]  # raw_prompt (a list of messages) is not a scalar column and is left out


def test_a_score_count_that_does_not_match_is_refused(tokenizer, tmp_path):
    batch = _batch(tokenizer, ["1+2=", "9+9="], ["3", "18"])
    with pytest.raises(ValueError, match="1 scores for 2 samples"):
        dump_generations(tmp_path, 1, tokenizer, batch, [1.0])


def test_the_same_prompts_are_picked_at_every_validation():
    from verl.trainer.ppo.generation_dump import pick_samples

    prompts = [f"{i}+{i}=" for i in range(20)]
    first = pick_samples(prompts, ["a"] * 20, [0.0] * 20, 4)
    # a later validation: other answers, and the loader may hand the prompts over in another order
    order = list(reversed(range(20)))
    later = pick_samples([prompts[i] for i in order], [f"b{i}" for i in order], [1.0] * 20, 4)
    assert len(first) == 4 and [s["input"] for s in later] == [s["input"] for s in first]
    assert {s["output"] for s in later} == {f"b{prompts.index(s['input'])}" for s in first}
    assert len({s["input"] for s in first}) == 4
    assert pick_samples(prompts[:2], ["x", "y"], [1.0, 0.0], 5) == pick_samples(prompts[:2], ["x", "y"], [1.0, 0.0], 2)
