"""Reward-loop managers: run_single per sample, batch scoring through the adapter, rate limiting, the registry."""

import asyncio
import logging
import time

import pytest
import torch
from _reward_batches import RESPONSE_LEN, make_batch, scores_at_last_token

from verl.experimental.reward_loop.adapter import RewardLoopAdapter, run_on_reward_loop, shared_reward_loop
from verl.experimental.reward_loop.reward_manager import (
    REWARD_LOOP_MANAGER_REGISTRY,
    DAPORewardManager,
    NaiveRewardManager,
    RewardManagerBase,
    get_reward_manager_cls,
    register,
)
from verl.experimental.reward_loop.reward_manager.base import split_score
from verl.experimental.reward_loop.reward_manager.limited import AsyncTokenBucket, RateLimitedRewardManager

CONFIG = {"reward": {}, "data": {"reward_fn_key": "data_source"}}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_split_score_reports_like_verl():
    assert split_score(1) == (1.0, {"acc": 1.0})
    assert split_score({"score": 0.5, "pred": "7"}) == (0.5, {"score": 0.5, "pred": "7"})
    with pytest.raises(ValueError, match="must include 'score'"):
        split_score({"acc": 1})


def test_naive_run_single_scores_last_row_with_agent_fields(tokenizer):
    seen = {}

    def record(data_source, solution_str, ground_truth, extra_info):
        seen.update(source=data_source, solution=solution_str, truth=ground_truth, extra=extra_info)
        return float(solution_str == ground_truth)

    data = make_batch(
        tokenizer, ["5", "12"], ["0", "12"], extra={"__num_turns__": [1, 3], "tool_extra_fields": [{}, {"calls": 2}]}
    )
    manager = NaiveRewardManager(CONFIG, tokenizer, record)
    out = asyncio.run(manager.run_single(data))  # a two-row input is scored on its last row
    assert out == {"reward_score": 1.0, "reward_extra_info": {"acc": 1.0}}
    assert seen["solution"] == "12" and seen["truth"] == "12" and seen["source"] == "synthetic/addition"
    assert seen["extra"] == {"index": 1, "calls": 2, "num_turns": 3, "rollout_reward_scores": {}}
    assert data.non_tensor_batch["extra_info"][1] == {"index": 1}  # the batch's own dict is not modified


def test_async_scoring_function_is_awaited(tokenizer):
    async def judge(data_source, solution_str, ground_truth, extra_info):
        await asyncio.sleep(0)
        return {"score": 2.0, "verdict": "ok"}

    data = make_batch(tokenizer, ["3"], ["3"])
    out = asyncio.run(NaiveRewardManager(CONFIG, tokenizer, judge).run_single(data))
    assert out == {"reward_score": 2.0, "reward_extra_info": {"score": 2.0, "verdict": "ok"}}


def test_default_compute_score_and_batch_call(tokenizer):
    data = make_batch(tokenizer, ["1", "5", "12"], ["1", "2", "12"])
    out = NaiveRewardManager(CONFIG, tokenizer, None)(data, return_dict=True)
    assert scores_at_last_token(out["reward_tensor"], data) == [1.0, 0.0, 1.0]
    assert out["reward_extra_info"] == {"acc": [1.0, 0.0, 1.0]}
    assert out["reward_metrics"] == {"reward/num_failed": 0.0, "reward/num_timeout": 0.0}


def test_assemble_rm_scores_places_each_score_at_last_token(tokenizer):
    data = make_batch(tokenizer, ["1", "1234"], ["", ""])
    rm_scores = RewardManagerBase.assemble_rm_scores(data, [0.5, -1.0])
    assert rm_scores.shape == (2, RESPONSE_LEN) and rm_scores.dtype == torch.float32
    assert scores_at_last_token(rm_scores, data) == [0.5, -1.0]
    with pytest.raises(ValueError, match="1 scores for a batch of 2"):
        RewardManagerBase.assemble_rm_scores(data, [1.0])


class Flaky(RewardManagerBase):
    """Raises on "9", hangs on "8", else scores the response length."""

    async def run_single(self, data):
        sample = await self.read_sample(data)
        if sample.response_str == "9":
            raise RuntimeError("judge unavailable")
        if sample.response_str == "8":
            await asyncio.sleep(30)
        return {"reward_score": float(len(sample.response_str)), "reward_extra_info": {"n": len(sample.response_str)}}


def test_adapter_counts_failures_and_timeouts(tokenizer, caplog):
    data = make_batch(tokenizer, ["12", "9", "8", "345"], ["", "", "", ""])
    adapter = RewardLoopAdapter(Flaky(CONFIG, tokenizer), timeout_s=0.5)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        out = adapter(data, return_dict=True)
    assert time.monotonic() - start < 5  # rows run concurrently; the hung one is cut at timeout_s
    assert scores_at_last_token(out["reward_tensor"], data) == [2.0, 0.0, 0.0, 3.0]
    assert out["reward_metrics"] == {"reward/num_failed": 2.0, "reward/num_timeout": 1.0}
    assert out["reward_extra_info"] == {"n": [2, 0.0, 0.0, 3]}
    assert "Flaky.run_single failed on sample 1 (scored 0.0): RuntimeError: judge unavailable" in caplog.text
    assert torch.equal(adapter(make_batch(tokenizer, ["12"], [""])), out["reward_tensor"][:1])


def test_adapter_passes_precomputed_rm_scores(tokenizer):
    data = make_batch(tokenizer, ["1"], ["1"])
    data.batch["rm_scores"] = torch.full((1, RESPONSE_LEN), 0.25)
    assert torch.equal(RewardLoopAdapter(Flaky(CONFIG, tokenizer))(data), data.batch["rm_scores"])


def test_shared_loop_refuses_blocking_from_itself():
    async def nested():
        inner = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="from the reward loop itself"):
            run_on_reward_loop(inner)
        return asyncio.get_running_loop()

    assert run_on_reward_loop(nested()) is shared_reward_loop()


def test_dapo_overlong_penalty_from_reward_kwargs(tokenizer):
    # lengths include <eos>: "1" -> 2 tokens, "1234567" -> 8 tokens; max 10, buffer 4: penalty from 7 tokens on
    cfg = {
        "reward": {
            "reward_kwargs": {"overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 2.0, "log": True}}
        },
        "data": {"max_response_length": RESPONSE_LEN},
    }
    data = make_batch(tokenizer, ["1", "1234567"], ["1", "1234567"])
    out = DAPORewardManager(cfg, tokenizer, None)(data, return_dict=True)
    penalty = -(8 - 6) / 4 * 2.0
    assert scores_at_last_token(out["reward_tensor"], data) == pytest.approx([1.0, 1.0 + penalty])
    assert out["reward_extra_info"]["overlong"] == [False, True]
    with pytest.raises(ValueError, match="overlong_buffer_cfg.len must be in"):
        DAPORewardManager(
            {
                "reward": {"reward_kwargs": {"overlong_buffer_cfg": {"enable": True, "len": 20}}},
                "data": {"max_response_length": 10},
            },
            tokenizer,
            None,
        )


def test_token_bucket_paces_requests():
    async def run():
        bucket = AsyncTokenBucket(rate_limit=20.0, max_tokens=1.0)
        start = asyncio.get_running_loop().time()
        for _ in range(4):  # the first is free (bucket starts full), then one every 50 ms
            await bucket.acquire(1.0)
        paced = asyncio.get_running_loop().time() - start
        start = asyncio.get_running_loop().time()
        await bucket.acquire(3.0)  # larger than the bucket: waits for its size, then leaves debt
        oversized = asyncio.get_running_loop().time() - start
        return paced, oversized, bucket.tokens

    paced, oversized, tokens = asyncio.run(run())
    assert 0.13 <= paced < 0.6
    assert 0.13 <= oversized < 0.6 and tokens < 0


def test_rate_limited_manager_reports_timeouts_and_errors(tokenizer):
    class Limited(RateLimitedRewardManager):  # a subclass: the class-wide limiters are set up afresh
        pass

    def score(data_source, solution_str, ground_truth, extra_info):
        if solution_str == "9":
            raise ConnectionError("429 Too Many Requests")
        if solution_str == "8":
            time.sleep(1.0)
        return 1.0

    cfg = {"reward": {"max_concurrent": 2, "max_rpm": 6000, "timeout": 0.3}}
    manager = Limited(cfg, tokenizer, score)
    assert Limited._max_concurrent == 2 and Limited._rpm_limiter is not None and Limited._tpm_limiter is None
    data = make_batch(tokenizer, ["1", "9", "8"], ["1", "1", "1"])
    out = manager(data, return_dict=True)
    assert scores_at_last_token(out["reward_tensor"], data) == [1.0, 0.0, 0.0]
    assert out["reward_extra_info"]["error"] == [0.0, "ConnectionError: 429 Too Many Requests", 0.0]
    assert out["reward_extra_info"]["timeout"] == [0.0, 0.0, True]
    assert out["reward_metrics"]["reward/num_failed"] == 0.0  # handled inside the manager, as in verl


def test_registry_refuses_a_second_class_under_a_name():
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    assert get_reward_manager_cls("rate_limited") is RateLimitedRewardManager
    with pytest.raises(ValueError, match="unknown reward-loop manager 'nope'.*'naive'"):
        get_reward_manager_cls("nope")

    @register("test_loop_only")
    class Mine(NaiveRewardManager):
        pass

    try:
        assert register("test_loop_only")(Mine) is Mine
        with pytest.raises(ValueError, match="already registered"):
            register("test_loop_only")(NaiveRewardManager)
    finally:
        REWARD_LOOP_MANAGER_REGISTRY.pop("test_loop_only")


def test_served_reward_models_are_not_in_this_build():
    from verl.experimental.reward_loop import RewardModelManager
    from verl.utils.extras import MissingExtraError

    with pytest.raises(MissingExtraError, match=r"RewardModelManager needs reward-model servers.*not part of this"):
        RewardModelManager(None, None)
