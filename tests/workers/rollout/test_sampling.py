"""Sampling parameters parsing and batched next-token sampling with per-row parameters."""

from __future__ import annotations

import pytest
import torch

from verl.workers.rollout.hf.sampling import RowSamplingState, SamplingParams, sample_next_tokens

DEFAULTS = {"max_tokens": 16}


def _state(params: list[SamplingParams], generators=None) -> RowSamplingState:
    return RowSamplingState(params, generators or [None] * len(params), torch.device("cpu"))


def test_defaults_fill_missing_keys_and_greedy_forms():
    p = SamplingParams.from_dict({"temperature": 0.5}, defaults={"max_tokens": 7, "logprobs": True}, request_id="x")
    assert (p.temperature, p.max_tokens, p.logprobs, p.greedy, p.top_k) == (0.5, 7, True, False, 0)
    assert SamplingParams.from_dict({"temperature": 0}, defaults=DEFAULTS, request_id="x").greedy
    assert SamplingParams.from_dict({"do_sample": False}, defaults=DEFAULTS, request_id="x").greedy
    assert SamplingParams.from_dict({"top_k": 0}, defaults=DEFAULTS, request_id="x").top_k == 0


@pytest.mark.parametrize(
    "params, key",
    [
        ({"n": 2}, "n"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"stop_token_ids": 3}, "stop_token_ids"),
        ({"seed": "a"}, "seed"),
        ({"top_k": -2}, "top_k"),
    ],
)
def test_unsupported_values_name_key_and_request(params, key):
    with pytest.raises(ValueError, match=rf"request rq: sampling_params\['{key}'\]"):
        SamplingParams.from_dict(params, defaults=DEFAULTS, request_id="rq")


def test_greedy_rows_take_argmax_and_report_plain_log_softmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]])
    params = [SamplingParams(greedy=True, logprobs=True)] * 2
    tokens, log_probs = sample_next_tokens(logits, _state(params))
    assert tokens.tolist() == [1, 0]
    torch.testing.assert_close(log_probs, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])


def test_top_k_and_top_p_restrict_support_per_row():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    params = [SamplingParams(top_k=2), SamplingParams(top_p=0.6), SamplingParams()]
    gen = torch.Generator().manual_seed(0)
    seen = [set(), set(), set()]
    for _ in range(300):
        tokens, _ = sample_next_tokens(logits, _state(params), gen)
        for row, tok in enumerate(tokens.tolist()):
            seen[row].add(tok)
    assert seen[0] == {0, 1}  # top-2
    assert seen[1] == {0, 1}  # 0.5 < 0.6 so the second token is needed, the third is not
    assert seen[2] == {0, 1, 2, 3}


def test_log_probs_use_temperature_but_not_truncation():
    logits = torch.tensor([[1.0, 0.5, 0.0, -2.0]])
    params = [SamplingParams(temperature=0.5, top_k=1, logprobs=True)]
    tokens, log_probs = sample_next_tokens(logits, _state(params))
    assert tokens.tolist() == [0]
    torch.testing.assert_close(log_probs, torch.log_softmax(logits / 0.5, -1)[:, 0])


def test_seeded_row_is_independent_of_other_rows():
    logits = torch.zeros(3, 50)
    params = [SamplingParams(seed=5)] * 3

    def draw(gens):
        return sample_next_tokens(logits, _state(params, gens), torch.Generator().manual_seed(99))[0]

    a = draw([torch.Generator().manual_seed(5), None, None])
    b = draw([torch.Generator().manual_seed(5), torch.Generator().manual_seed(1), None])
    assert a[0] == b[0]
