"""rollout.max_num_batched_tokens in the hf engine: one prefill forward stays within the token budget, and splitting
the admitted prompts into groups changes no token or log-prob."""

from __future__ import annotations

import asyncio

import pytest
import torch
from _rollout_helpers import random_prompts, rollout_config

from verl.workers.rollout.hf.kv_batch import prefill_groups


@pytest.mark.parametrize(
    "lengths, budget, expected",
    [
        ([3, 3, 3], None, [(0, 3)]),
        ([3, 3, 3], 8, [(0, 2), (2, 3)]),  # a third row would make 3 x 3 = 9 padded tokens
        ([2, 10, 2], 8, [(0, 1), (1, 2), (2, 3)]),  # the long prompt is prefilled alone
        ([1, 4], 6, [(0, 1), (1, 2)]),  # the longer prompt widens the padding of the whole group: 2 x 4 = 8
        ([4, 1, 1], 12, [(0, 3)]),
        ([], 8, []),
    ],
)
def test_groups_are_consecutive_and_within_the_budget(lengths, budget, expected):
    groups = prefill_groups(lengths, budget)
    assert [(g.start, g.stop) for g in groups] == expected
    for group in groups:
        rows = lengths[group]
        assert len(rows) == 1 or budget is None or len(rows) * max(rows) <= budget


def test_a_budget_below_one_token_names_the_key():
    with pytest.raises(ValueError, match=r"rollout.max_num_batched_tokens must be >= 1, got 0"):
        prefill_groups([3], 0)


def _prefill_shapes(model) -> tuple[list[tuple[int, int]], object]:
    """(rows, width) of every forward longer than one token, i.e. every prefill."""
    shapes: list[tuple[int, int]] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 1:
            shapes.append(tuple(ids.shape))

    return shapes, model.register_forward_pre_hook(record, with_kwargs=True)


def test_the_server_prefills_within_the_budget_and_samples_the_same_tokens(make_server):
    prompts = random_prompts(8, 60, min_len=3, max_len=12, seed=4)
    params = {"temperature": 1.0, "max_tokens": 10, "logprobs": True, "ignore_eos": True, "seed": 11}
    results, shapes_by_budget = {}, {}
    for budget in (8192, 24):  # 8192: every admitted prompt in one prefill
        server = make_server(rollout_config(max_num_seqs=8, max_num_batched_tokens=budget), min_admit_chunk=8)
        shapes, handle = _prefill_shapes(server.model)

        async def run(server):
            return await asyncio.gather(
                *[server.generate(p, dict(params, seed=11 + i), f"r{i}") for i, p in enumerate(prompts)]
            )

        try:
            results[budget] = asyncio.run(run(server))
        finally:
            handle.remove()
        shapes_by_budget[budget] = shapes
    assert max(rows * width for rows, width in shapes_by_budget[24]) <= 24
    assert len(shapes_by_budget[24]) > len(shapes_by_budget[8192])  # the budget did split the prefill
    assert max(rows * width for rows, width in shapes_by_budget[8192]) > 24
    for whole, grouped in zip(results[8192], results[24]):
        assert grouped.token_ids == whole.token_ids
        torch.testing.assert_close(torch.tensor(grouped.log_probs), torch.tensor(whole.log_probs), atol=1e-5, rtol=0)


def test_a_bad_budget_fails_when_the_config_is_built():
    with pytest.raises(ValueError, match="max_num_batched_tokens: must be >= 1, got -5"):
        rollout_config(max_num_batched_tokens=-5)
