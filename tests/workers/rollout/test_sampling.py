"""Sampling parameters parsing and batched next-token sampling with per-row parameters."""

from __future__ import annotations

import pytest
import torch

from verl.workers.rollout.hf.sampling import (
    RowSamplingState,
    SamplingParams,
    categorical_from_uniform,
    sample_next_tokens,
    seeded_row_uniform,
)

DEFAULTS = {"max_tokens": 16}


def _state(params: list[SamplingParams], positions=None) -> RowSamplingState:
    return RowSamplingState(params, torch.device("cpu"), positions)


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


@pytest.mark.parametrize("temperatures", [(1.0, 1.0, 1.0), (1.0, 0.5, 2.0), (0.5, 0.5, 0.5)])
def test_each_row_is_scaled_by_its_own_temperature(temperatures):
    # the sampler decides on the host whether any row needs scaling; a mixed batch must still scale each row
    logits = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=t, top_k=1, logprobs=True) for t in temperatures]
    tokens, log_probs = sample_next_tokens(logits, _state(params))
    assert tokens.tolist() == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits / torch.tensor(temperatures).unsqueeze(1), -1).gather(1, tokens[:, None])
    torch.testing.assert_close(log_probs, expected.squeeze(1))


def test_seeded_row_is_independent_of_other_rows():
    logits = torch.randn(1, 50).repeat(3, 1)

    def draw(params, positions=None):
        return sample_next_tokens(logits, _state(params, positions), torch.Generator().manual_seed(99))[0]

    a = draw([SamplingParams(seed=5), SamplingParams(), SamplingParams()])
    b = draw([SamplingParams(seed=5), SamplingParams(seed=1), SamplingParams(temperature=0.5)])
    assert a[0] == b[0]
    # the draw is a function of (seed, position): the row's place in the batch does not matter
    c = draw([SamplingParams(seed=1), SamplingParams(), SamplingParams(seed=5)])
    assert c[2] == a[0]


def test_seeded_draws_advance_with_the_position_and_repeat_from_it():
    logits = torch.zeros(1, 1000)
    state = _state([SamplingParams(seed=7)])
    first = [sample_next_tokens(logits, state)[0].item() for _ in range(20)]
    assert state.positions.tolist() == [20]
    assert len(set(first)) > 15  # a fresh draw per position, not the same token again
    again = _state([SamplingParams(seed=7)], positions=[10])
    assert [sample_next_tokens(logits, again)[0].item() for _ in range(10)] == first[10:]


@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (0.7, 3)])
def test_seeded_draws_follow_the_distribution(temperature, top_k):
    """Frequencies over 4000 seeded rows match softmax(logits / T) restricted to the top-k (4 sigma bounds)."""
    rows = 4000
    logits = torch.log(torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05])).repeat(rows, 1)
    params = [SamplingParams(seed=1000 + i, temperature=temperature, top_k=top_k) for i in range(rows)]
    tokens, _ = sample_next_tokens(logits, _state(params))
    expected = torch.softmax(logits[0] / temperature, -1)
    if top_k:
        expected[top_k:] = 0
        expected /= expected.sum()
    counts = torch.bincount(tokens, minlength=5).double()
    sigma = torch.sqrt(rows * expected * (1 - expected))
    assert torch.all((counts - rows * expected).abs() <= 4 * sigma + 1), (counts, rows * expected)


def _assert_frequencies(tokens: torch.Tensor, expected: torch.Tensor) -> None:
    """Token counts within 4 sigma of ``len(tokens) * expected``; tokens of probability zero never drawn."""
    rows = tokens.numel()
    counts = torch.bincount(tokens, minlength=expected.numel()).double()
    sigma = torch.sqrt(rows * expected * (1 - expected))
    assert torch.all(counts[expected == 0] == 0), counts[expected == 0].nonzero()
    assert torch.all((counts - rows * expected).abs() <= 4 * sigma + 1), (counts, rows * expected)


def _spread_distribution(vocab: int) -> torch.Tensor:
    """Mass on a few tokens in the first, a middle and the last (partial) block of the inverse CDF; zero elsewhere."""
    probs = torch.zeros(vocab, dtype=torch.float64)
    mass = torch.tensor([0.1, 0.05, 0.3, 0.05, 0.2, 0.1, 0.2], dtype=torch.float64)
    probs[[0, 3, 700, 1023, 1024, vocab - 2, vocab - 1]] = mass
    return probs


@pytest.mark.parametrize("seeded", [True, False])
def test_draws_follow_the_distribution_across_vocabulary_blocks(seeded):
    """A vocabulary of several inverse-CDF blocks plus a partial one: frequencies match softmax(logits)."""
    rows, vocab = 6000, 3 * 512 + 37
    expected = _spread_distribution(vocab)
    logits = torch.log(expected).float().repeat(rows, 1)
    params = [SamplingParams(seed=(77 + i) if seeded else None) for i in range(rows)]
    tokens, _ = sample_next_tokens(logits, _state(params), torch.Generator().manual_seed(3))
    _assert_frequencies(tokens, expected)


def test_inverse_cdf_extremes_land_on_tokens_with_mass():
    """u = 0 takes the first token with mass and u = 1 the last; the zero-mass tokens around them, at block edges and
    in the partial last block, are never taken, nor where float32 block sums round above the block's exact mass."""
    vocab = 2 * 512 + 5
    probs = torch.zeros(2, vocab)
    probs[:, [10, 511, 512, 900]] = 0.25
    probs[1] *= 3.0  # unnormalised rows are fine
    assert categorical_from_uniform(probs, torch.zeros(2, dtype=torch.float64)).tolist() == [10, 10]
    assert categorical_from_uniform(probs, torch.ones(2, dtype=torch.float64)).tolist() == [900, 900]
    # exactly a quarter of the mass lies before token 511
    assert categorical_from_uniform(probs[:1], torch.tensor([0.25], dtype=torch.float64)).tolist() == [511]
    # 1 + 1.5 * 2**-24 rounds up to 1 + 2**-23 in float32, so the block's sum exceeds its float64 cumulative sum
    rounding = torch.zeros(1, vocab)
    rounding[0, :2] = torch.tensor([1.0, 1.5 * 2.0**-24])
    assert categorical_from_uniform(rounding, torch.ones(1, dtype=torch.float64)).tolist() == [1]


def test_unseeded_rows_follow_the_distribution_from_the_generator_and_repeat_with_it():
    rows = 4000
    expected = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)
    logits = torch.log(expected).float().repeat(rows, 1)
    params = [SamplingParams()] * rows
    tokens, _ = sample_next_tokens(logits, _state(params), torch.Generator().manual_seed(11))
    _assert_frequencies(tokens, expected)
    again, _ = sample_next_tokens(logits, _state(params), torch.Generator().manual_seed(11))
    assert torch.equal(tokens, again)


def test_seeded_row_uniform_is_a_function_of_key_and_position():
    keys = torch.tensor([5, 5, 6], dtype=torch.int64)
    positions = torch.tensor([0, 1, 0], dtype=torch.int64)
    u = seeded_row_uniform(keys, positions)
    assert u.dtype == torch.float64 and bool(((u > 0) & (u < 1)).all())
    assert len(set(u.tolist())) == 3
    torch.testing.assert_close(seeded_row_uniform(keys[[2, 0]], positions[[2, 0]]), u[[2, 0]], rtol=0, atol=0)
    many = seeded_row_uniform(torch.arange(20000, dtype=torch.int64), torch.zeros(20000, dtype=torch.int64))
    assert abs(float(many.mean()) - 0.5) < 0.01 and abs(float((many < 0.1).double().mean()) - 0.1) < 0.01
