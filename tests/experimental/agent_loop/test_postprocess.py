"""assemble_batch: the trainer's layout from trajectories, checked against tensors written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.experimental.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.postprocess import NUM_TURNS_KEY, assemble_batch

PAD = 0


def _outputs(**overrides):
    a = AgentLoopOutput(
        prompt_ids=[7, 8],
        response_ids=[11, 12, 5, 13],
        response_mask=[1, 1, 0, 1],
        response_logprobs=[-0.5, -0.25, 0.0, -1.0],
        num_turns=4,
        extra_fields={"tag": "a"},
    )
    b = AgentLoopOutput(
        prompt_ids=[9, 10, 11], response_ids=[14], response_mask=[1], response_logprobs=[-2.0], num_turns=2
    )
    for key, values in overrides.items():
        setattr(a, key, values[0])
        setattr(b, key, values[1])
    return [a, b]


def test_layout_matches_hand_built_tensors():
    out = assemble_batch(
        _outputs(),
        prompt_length=4,
        response_length=5,
        pad_token_id=PAD,
        non_tensors={"uid": np.array(["u0", "u1"], dtype=object)},
        meta_info={"validate": True},
    )
    b = out.batch
    assert b["prompts"].tolist() == [[0, 0, 7, 8], [0, 9, 10, 11]]
    assert b["responses"].tolist() == [[11, 12, 5, 13, 0], [14, 0, 0, 0, 0]]
    assert b["response_mask"].tolist() == [[1, 1, 0, 1, 0], [1, 0, 0, 0, 0]]
    assert b["input_ids"].tolist() == [[0, 0, 7, 8, 11, 12, 5, 13, 0], [0, 9, 10, 11, 14, 0, 0, 0, 0]]
    # inserted (tool) tokens are attended to; only padding is not
    assert b["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0, 0, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 0, 0, 1, 2, 3, 4, 5, 5], [0, 0, 1, 2, 3, 3, 3, 3, 3]]
    assert b["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0, -1.0, 0.0], [-2.0, 0.0, 0.0, 0.0, 0.0]]
    assert "rm_scores" not in b.keys()
    assert out.non_tensor_batch[NUM_TURNS_KEY].tolist() == [4, 2]
    assert out.non_tensor_batch["tag"].tolist() == ["a", None]
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u1"]
    assert out.meta_info == {"validate": True}


def test_scores_sit_on_last_response_token_and_responses_are_truncated():
    outputs = _outputs(reward_score=[1.5, -1.0], response_logprobs=[None, None])
    out = assemble_batch(outputs, prompt_length=3, response_length=3, pad_token_id=PAD)
    assert out.batch["responses"].tolist() == [[11, 12, 5], [14, 0, 0]]
    assert out.batch["rm_scores"].tolist() == [[0.0, 0.0, 1.5], [-1.0, 0.0, 0.0]]
    assert "rollout_log_probs" not in out.batch.keys()


def test_errors_name_the_culprit():
    with pytest.raises(ValueError, match="sample 1: prompt has 3 tokens, more than rollout.prompt_length=2"):
        assemble_batch(_outputs(), prompt_length=2, response_length=5, pad_token_id=PAD)
    with pytest.raises(ValueError, match=r"outputs \[1\] have no reward_score"):
        assemble_batch(_outputs(reward_score=[1.0, None]), prompt_length=4, response_length=5, pad_token_id=PAD)
    with pytest.raises(ValueError, match="response_mask has 1 entries for 2 response_ids"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2, 3], response_mask=[1])
    with pytest.raises(ValueError, match="response_logprobs has 1 entries for 2 response_ids"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2, 3], response_mask=[1, 1], response_logprobs=[0.0])
    with pytest.raises(ValueError, match="non-tensor column 'uid' has 1 rows for 2 outputs"):
        assemble_batch(
            _outputs(),
            prompt_length=4,
            response_length=5,
            pad_token_id=PAD,
            non_tensors={"uid": np.array(["x"], dtype=object)},
        )


def test_layout_dtypes_are_long_and_float():
    out = assemble_batch(_outputs(), prompt_length=4, response_length=5, pad_token_id=PAD)
    for key in ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert out.batch[key].dtype == torch.long, key
    assert out.batch["rollout_log_probs"].dtype == torch.float32


def test_worker_shards_with_different_loop_mixes_concatenate():
    from verl.experimental.agent_loop.postprocess import align_parts
    from verl.protocol import DataProto

    a, b = _outputs()
    shard0 = assemble_batch([a], prompt_length=4, response_length=5, pad_token_id=PAD)  # extra "tag", log-probs
    b.response_logprobs = None
    shard1 = assemble_batch([b], prompt_length=4, response_length=5, pad_token_id=PAD)  # no "tag", no log-probs
    out = DataProto.concat(align_parts([shard0, shard1]))
    assert out.non_tensor_batch["tag"].tolist() == ["a", None]
    assert "rollout_log_probs" not in out.batch.keys()
    assert out.batch["responses"].tolist() == [[11, 12, 5, 13, 0], [14, 0, 0, 0, 0]]

    a.reward_score = 1.0
    scored = assemble_batch([a], prompt_length=4, response_length=5, pad_token_id=PAD)
    with pytest.raises(ValueError, match="some agent loop workers returned rm_scores and others did not"):
        align_parts([scored, shard1])
