"""AgentLoopWorker in-process over the real hf engine: layout against hand-built rows, per-sample loop choice,
streaming reward."""

from __future__ import annotations

import asyncio
import time

import pytest
from _agent_loop_helpers import TOOL_TOKENS, expected_rows, greedy, make_config, prompt_batch

from verl.experimental.agent_loop import AgentLoopWorker
from verl.experimental.agent_loop.postprocess import NUM_TURNS_KEY
from verl.experimental.agent_loop.weight_versions import VERSION_KEYS, merge_version_tags
from verl.experimental.agent_loop.worker import AGENT_LOOP_METRICS_KEY, resolve_agent_names
from verl.workers.reward_manager import NaiveRewardManager

PROMPTS = [[1, 20, 21], [1, 30, 31, 32, 33], [1, 40]]


def test_layout_matches_hand_built_rows(tiny_model_dir, tiny_lm, make_replica):
    config = make_config(tiny_model_dir)
    P, R = config["rollout"].prompt_length, config["rollout"].response_length
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])])
    batch = prompt_batch(
        PROMPTS,
        agent_names=["two_turn_test", "two_turn_test", "single_turn_agent"],
        turn_tokens=[[2, 3], [4, 1], None],
        uid=["a", "b", "c"],
    )
    out = asyncio.run(worker.generate_sequences(batch))

    expected = []
    for prompt, turns in zip(PROMPTS[:2], [[2, 3], [4, 1]]):
        first = greedy(tiny_lm, prompt, turns[0])
        second = greedy(tiny_lm, prompt + first + TOOL_TOKENS, turns[1])
        mask = [1] * len(first) + [0] * len(TOOL_TOKENS) + [1] * len(second)
        expected.append(expected_rows(prompt, first + TOOL_TOKENS + second, mask, P, R, worker.pad_token_id))
    single = greedy(tiny_lm, PROMPTS[2], R)
    expected.append(expected_rows(PROMPTS[2], single, [1] * R, P, R, worker.pad_token_id))

    assert worker.pad_token_id == worker.tokenizer.pad_token_id
    for key in expected[0]:
        assert out.batch[key].tolist() == [rows[key] for rows in expected], key
    log_probs = out.batch["rollout_log_probs"]
    mask = out.batch["response_mask"].bool()
    assert (log_probs[~mask] == 0).all() and (log_probs[mask] < 0).all()
    assert out.non_tensor_batch[NUM_TURNS_KEY].tolist() == [4, 4, 2]
    assert out.non_tensor_batch["uid"].tolist() == ["a", "b", "c"]
    assert out.non_tensor_batch["stop_reason"].tolist() == [None, None, "length"]
    assert len(out.meta_info[AGENT_LOOP_METRICS_KEY]) == 3
    assert "rm_scores" not in out.batch.keys()


def test_default_agent_and_unknown_agent_name(tiny_model_dir, make_replica):
    batch = prompt_batch([[1, 2], [1, 3], [1, 4]], agent_names=["two_turn_test", None, ""])
    assert resolve_agent_names(batch, "single_turn_agent") == [
        "two_turn_test",
        "single_turn_agent",
        "single_turn_agent",
    ]
    config = make_config(tiny_model_dir)
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])])
    bad = prompt_batch([[1, 2]], agent_names=["no_such_agent"])
    with pytest.raises(
        ValueError,
        match=r"agent_name 'no_such_agent' is not a registered agent loop; "
        r"registered: .*single_turn_agent.*two_turn_test",
    ):
        asyncio.run(worker.generate_sequences(bad))


def test_reward_is_scored_per_trajectory_as_it_finishes(tiny_model_dir, make_replica):
    import verl.trainer.ppo.reward  # noqa: F401  (its first import, seconds, is not what this test times)

    calls: list[tuple[float, int]] = []

    def score(data_source, solution_str, ground_truth, extra_info=None):
        calls.append((time.monotonic(), extra_info["i"]))
        return {"score": float(len(solution_str)), "acc": extra_info["i"] == 0}

    config = make_config(tiny_model_dir)
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])])
    worker.reward_fn = NaiveRewardManager(worker.tokenizer, compute_score=score, num_workers=0)
    delays = [0.0, 0.5, 1.0]
    batch = prompt_batch(
        [[1, 2], [1, 3], [1, 4]],
        agent_names=["delayed_test"] * 3,
        delay_s=delays,
        data_source=["test"] * 3,
        extra_info=[{"i": i} for i in range(3)],
    )
    out = asyncio.run(worker.generate_sequences(batch))

    finished = out.non_tensor_batch["finished_at"].tolist()
    scored_at = {i: t for t, i in calls}
    assert sorted(scored_at) == [0, 1, 2]
    # each trajectory is scored after it finished, and the fast one before the slow one finished (streaming)
    assert all(scored_at[i] >= finished[i] for i in range(3))
    assert scored_at[0] < finished[2] - 0.5
    responses = out.batch["responses"]
    lengths = out.batch["attention_mask"][:, config["rollout"].prompt_length :].sum(-1).tolist()
    for i in range(3):
        text = worker.tokenizer.decode(responses[i, : lengths[i]].tolist(), skip_special_tokens=True)
        row = out.batch["rm_scores"][i]
        assert row[lengths[i] - 1].item() == float(len(text))
        assert row.sum().item() == float(len(text))
    assert out.non_tensor_batch["acc"].tolist() == [True, False, False]
    assert all(m["compute_score"] > 0 for m in out.meta_info[AGENT_LOOP_METRICS_KEY])
    assert out.meta_info["reward_extra_keys"] == ["acc"]


def test_version_tags_of_a_trajectory_travel_in_its_columns(tiny_model_dir, tiny_lm, make_replica):
    """Through the async recipes' server manager, every call reports the weight versions it ran under; the built-in
    loops fold them into the trajectory (verl's min/max_global_steps columns); a loop that does not leaves None."""
    from verl.experimental.fully_async_policy.server_manager import PartialRolloutServerManager

    config = make_config(tiny_model_dir)
    replica = make_replica(config["rollout"])

    async def run():
        await replica.update_weights(list(tiny_lm.state_dict().items()), 5)
        worker = AgentLoopWorker(config, PartialRolloutServerManager([replica]))
        batch = prompt_batch(
            PROMPTS[:2], agent_names=["single_turn_agent", "two_turn_test"], turn_tokens=[None, [2, 3]]
        )
        return await worker.generate_sequences(batch)

    out = asyncio.run(run())
    columns = {key: out.non_tensor_batch[key].tolist() for key in VERSION_KEYS}
    assert columns == {"min_global_steps": [5, None], "max_global_steps": [5, None], "num_aborts": [0, None]}


def test_merging_version_tags_keeps_the_span_and_sums_the_aborts():
    fields: dict = {}
    merge_version_tags(fields, {"weight_version": 3})  # a call without tags changes nothing
    assert fields == {}
    merge_version_tags(fields, {"min_global_steps": 2, "max_global_steps": 3, "num_aborts": 1})
    merge_version_tags(fields, {"min_global_steps": 3, "max_global_steps": 5, "num_aborts": 2})
    merge_version_tags(fields, None)
    assert fields == {"min_global_steps": 2, "max_global_steps": 5, "num_aborts": 3}
