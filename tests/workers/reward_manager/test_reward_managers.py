"""Reward managers on batches built with the tiny tokenizer: placement, extra info, DAPO shaping, the process pool."""

import logging
import pickle

import pytest
import torch

from verl import DataProto
from verl.trainer.ppo.reward import CustomRewardFn
from verl.utils.torch_functional import pad_2d_list_to_length
from verl.workers.reward_manager import (
    REWARD_MANAGER_REGISTRY,
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    RewardRunner,
    get_reward_manager_cls,
    register,
)
from verl.workers.reward_manager.dapo import overlong_penalty

PROMPT_LEN, RESPONSE_LEN = 8, 10


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def make_batch(tokenizer, responses, ground_truths, data_source="synthetic/addition", eos=True):
    """Left-padded prompts and right-padded responses (ending in <eos>), like a rollout's output."""
    n = len(responses)
    prompt_rows = [tokenizer(f"{i}+1=", add_special_tokens=False)["input_ids"] for i in range(n)]
    response_rows = [
        tokenizer(r, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
        for r in responses
    ]
    pad = tokenizer.pad_token_id
    prompts = pad_2d_list_to_length(prompt_rows, pad, PROMPT_LEN, left_pad=True)
    resp = pad_2d_list_to_length(response_rows, pad, RESPONSE_LEN)
    prompt_mask = pad_2d_list_to_length([[1] * len(r) for r in prompt_rows], 0, PROMPT_LEN, left_pad=True)
    resp_mask = pad_2d_list_to_length([[1] * len(r) for r in response_rows], 0, RESPONSE_LEN)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": resp,
            "input_ids": torch.cat([prompts, resp], dim=1),
            "attention_mask": torch.cat([prompt_mask, resp_mask], dim=1),
        },
        non_tensors={
            "data_source": [data_source] * n,
            "reward_model": [{"ground_truth": gt, "style": "rule"} for gt in ground_truths],
            "extra_info": [{"index": i} for i in range(n)],
        },
    )


def last_positions(data):
    return (data.batch["attention_mask"][:, PROMPT_LEN:].sum(-1) - 1).tolist()


def assert_scores_at_last_token(data, reward_tensor, expected):
    assert reward_tensor.shape == (len(data), RESPONSE_LEN)
    for i, pos in enumerate(last_positions(data)):
        assert reward_tensor[i, pos].item() == pytest.approx(expected[i])
        others = torch.cat([reward_tensor[i, :pos], reward_tensor[i, pos + 1 :]])
        assert (others == 0).all()


def test_naive_default_score_in_process(tokenizer):
    data = make_batch(tokenizer, ["1", "5", "12"], ["1", "2", "12"])
    manager = NaiveRewardManager(tokenizer, num_examine=0)
    out = manager(data, return_dict=True)
    assert_scores_at_last_token(data, out["reward_tensor"], [1.0, 0.0, 1.0])
    assert out["reward_metrics"] == {"reward/num_failed": 0.0, "reward/num_timeout": 0.0}
    assert torch.equal(manager(data), out["reward_tensor"])


def test_response_is_decoded_without_pads_or_eos(tokenizer):
    seen = []

    def record(data_source, solution_str, ground_truth, extra_info=None):
        seen.append((data_source, solution_str, ground_truth, extra_info["index"]))
        return 0.5

    data = make_batch(tokenizer, ["ab c", "7"], ["x", "y"])
    NaiveRewardManager(tokenizer, compute_score=record)(data)
    assert seen == [("synthetic/addition", "ab c", "x", 0), ("synthetic/addition", "7", "y", 1)]


def test_dict_scores_fill_extra_info(tokenizer):
    def with_acc(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 2.0 if solution_str == ground_truth else -1.0, "acc": solution_str == ground_truth}

    data = make_batch(tokenizer, ["3", "4"], ["3", "5"])
    out = NaiveRewardManager(tokenizer, compute_score=with_acc)(data, return_dict=True)
    assert_scores_at_last_token(data, out["reward_tensor"], [2.0, -1.0])
    assert out["reward_extra_info"] == {"acc": [True, False]}


def test_dict_without_score_counts_as_failure(tokenizer, caplog):
    data = make_batch(tokenizer, ["3"], ["3"])
    with caplog.at_level(logging.WARNING):
        out = NaiveRewardManager(tokenizer, compute_score=lambda **kw: {"acc": 1})(data, return_dict=True)
    assert out["reward_metrics"]["reward/num_failed"] == 1.0
    assert "must include 'score'" in caplog.text and "sample 0" in caplog.text


def test_raising_function_in_process_scores_zero_and_is_logged_once(tokenizer, caplog):
    def flaky(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "9":
            raise RuntimeError("parser exploded")
        return 1.0

    data = make_batch(tokenizer, ["1", "9", "2"], ["1", "1", "1"])
    with caplog.at_level(logging.WARNING):
        out = NaiveRewardManager(tokenizer, compute_score=flaky)(data, return_dict=True)
    assert_scores_at_last_token(data, out["reward_tensor"], [1.0, 0.0, 1.0])
    assert out["reward_metrics"] == {"reward/num_failed": 1.0, "reward/num_timeout": 0.0}
    failures = [r.getMessage() for r in caplog.records if "failed on sample" in r.getMessage()]
    assert failures == ["reward function failed on sample 1 (scored 0.0): RuntimeError: parser exploded"]


def test_num_examine_prints_per_data_source(tokenizer, capsys):
    data = make_batch(tokenizer, ["1", "2", "3"], ["1", "2", "3"])
    NaiveRewardManager(tokenizer, num_examine=2)(data)
    printed = capsys.readouterr().out
    assert printed.count("[response]") == 2 and "[ground_truth] 1" in printed and "[score] 1.0" in printed


def test_rm_scores_pass_through(tokenizer):
    data = make_batch(tokenizer, ["1"], ["1"])
    rm = torch.full((1, RESPONSE_LEN), 0.25)
    data.batch["rm_scores"] = rm
    for manager in (NaiveRewardManager(tokenizer), BatchRewardManager(tokenizer), DAPORewardManager(tokenizer)):
        assert torch.equal(manager(data), rm)


def test_missing_keys_are_named(tokenizer):
    data = make_batch(tokenizer, ["1"], ["1"])
    data.batch.pop("prompts")
    with pytest.raises(KeyError, match="batch key 'prompts'"):
        NaiveRewardManager(tokenizer)(data)
    data = make_batch(tokenizer, ["1"], ["1"])
    with pytest.raises(KeyError, match="non-tensor key 'source'"):
        NaiveRewardManager(tokenizer, reward_fn_key="source")(data)


def batch_scorer(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    return [float(len(s)) for s in solution_strs]


def test_batch_manager_calls_once_with_lists(tokenizer):
    calls = []

    def scorer(data_sources, solution_strs, ground_truths, extra_infos):
        calls.append(list(solution_strs))
        return [{"score": float(s == g), "len": len(s)} for s, g in zip(solution_strs, ground_truths)]

    data = make_batch(tokenizer, ["12", "3", "44"], ["12", "4", "44"])
    out = BatchRewardManager(tokenizer, compute_score=scorer)(data, return_dict=True)
    assert calls == [["12", "3", "44"]]
    assert_scores_at_last_token(data, out["reward_tensor"], [1.0, 0.0, 1.0])
    assert out["reward_extra_info"] == {"len": [2, 1, 2]}
    # Without a custom function it falls back to default_compute_score per sample.
    default = BatchRewardManager(tokenizer)(data)
    assert_scores_at_last_token(data, default, [1.0, 0.0, 1.0])


def test_batch_manager_failure_zeroes_the_batch(tokenizer, caplog):
    data = make_batch(tokenizer, ["1", "2"], ["1", "2"])
    with caplog.at_level(logging.WARNING):
        out = BatchRewardManager(tokenizer, compute_score=lambda **kw: [1.0])(data, return_dict=True)
    assert (out["reward_tensor"] == 0).all()
    assert out["reward_metrics"]["reward/num_failed"] == 2.0
    assert "returned 1 scores for 2 samples" in caplog.text


@pytest.mark.parametrize(
    ("length", "expected"),
    [(4, 0.0), (6, 0.0), (7, -0.25), (8, -0.5), (10, -1.0)],
)
def test_overlong_penalty_formula(length, expected):
    # max 10, buffer 4: lengths up to 6 are free, then -factor * exceed / buffer.
    assert overlong_penalty(length, max_resp_len=10, buffer_len=4, penalty_factor=1.0) == pytest.approx(expected)


def test_dapo_applies_and_logs_penalty(tokenizer):
    # Response lengths include the <eos> token: "1" -> 2 tokens, "1234567" -> 8 tokens.
    data = make_batch(tokenizer, ["1", "1234567"], ["1", "1234567"])
    cfg = {"enable": True, "len": 4, "penalty_factor": 2.0, "log": True}
    manager = DAPORewardManager(tokenizer, max_resp_len=RESPONSE_LEN, overlong_buffer_cfg=cfg)
    out = manager(data, return_dict=True)
    expected_penalty = -(8 - (RESPONSE_LEN - 4)) / 4 * 2.0
    assert_scores_at_last_token(data, out["reward_tensor"], [1.0, 1.0 + expected_penalty])
    assert out["reward_extra_info"]["overlong_reward"] == [0.0, expected_penalty]
    assert out["reward_extra_info"]["overlong"] == [False, True]
    plain = DAPORewardManager(tokenizer, max_resp_len=RESPONSE_LEN)(data)
    assert_scores_at_last_token(data, plain, [1.0, 1.0])


def test_dapo_config_errors(tokenizer):
    with pytest.raises(ValueError, match="max_resp_len must be set"):
        DAPORewardManager(tokenizer, overlong_buffer_cfg={"enable": True, "len": 4})
    with pytest.raises(ValueError, match="overlong_buffer_cfg.len must be in"):
        DAPORewardManager(tokenizer, max_resp_len=8, overlong_buffer_cfg={"enable": True, "len": 9})


def test_registry():
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    assert get_reward_manager_cls("batch") is BatchRewardManager
    assert get_reward_manager_cls("dapo") is DAPORewardManager
    with pytest.raises(ValueError, match=r"unknown reward manager 'no_such'.*\['batch', 'dapo', 'naive', 'prime'"):
        get_reward_manager_cls("no_such")

    @register("test_only_manager")
    class Mine(NaiveRewardManager):
        pass

    try:
        assert get_reward_manager_cls("test_only_manager") is Mine
        with pytest.raises(ValueError, match="already registered"):
            register("test_only_manager")(NaiveRewardManager)
    finally:
        REWARD_MANAGER_REGISTRY.pop("test_only_manager")


SCORING_FILE = """
import time


def score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    if solution_str == "9":
        raise ValueError("cannot parse 9")
    if solution_str == "8":
        time.sleep(30)
    return float(solution_str == ground_truth) + bonus
"""


def test_process_pool_failures_timeouts_and_reuse(tokenizer, tmp_path, caplog):
    path = tmp_path / "scoring.py"
    path.write_text(SCORING_FILE)
    fn = CustomRewardFn(str(path), "score", {"bonus": 0.5})
    assert pickle.loads(pickle.dumps(fn)).path == str(path)
    manager = NaiveRewardManager(tokenizer, compute_score=fn, num_workers=2, timeout_s=1.5)
    try:
        data = make_batch(tokenizer, ["1", "9", "8", "3"], ["1", "1", "1", "1"])
        with caplog.at_level(logging.WARNING):
            out = manager(data, return_dict=True)
        assert_scores_at_last_token(data, out["reward_tensor"], [1.5, 0.0, 0.0, 0.5])
        assert out["reward_metrics"] == {"reward/num_failed": 2.0, "reward/num_timeout": 1.0}
        messages = [r.getMessage() for r in caplog.records if "failed on sample" in r.getMessage()]
        assert len(messages) == 2
        assert "sample 1" in messages[0] and "ValueError: cannot parse 9" in messages[0]
        assert "sample 2" in messages[1] and "timed out after 1.5 s" in messages[1]

        # The hung worker was replaced: the same pool keeps scoring.
        workers = list(manager.runner._workers)
        again = manager(make_batch(tokenizer, ["2", "1"], ["2", "2"]), return_dict=True)
        assert again["reward_metrics"]["reward/num_failed"] == 0.0
        assert again["reward_tensor"].sum().item() == pytest.approx(1.5 + 0.5)
        assert manager.runner._workers == workers and len(workers) == 2
    finally:
        manager.close()


def test_runner_survives_a_dying_worker(tmp_path):
    path = tmp_path / "dies.py"
    path.write_text("import os\n\ndef score(x):\n    if x == 1:\n        os._exit(7)\n    return x * 2\n")
    with RewardRunner(CustomRewardFn(str(path), "score"), num_workers=1, timeout_s=20) as runner:
        outcomes = runner.run([{"x": 0}, {"x": 1}, {"x": 3}])
    assert [o.value for o in outcomes] == [0, 0.0, 6]
    assert "died (exit code 7)" in outcomes[1].error and not outcomes[1].timed_out


def test_scoring_processes_start_without_torch(tmp_path):
    """The pool's processes import the runner and the built-in scores only: torch (seconds per process) stays out,
    so the first scored batch of a run does not wait for it."""
    path = tmp_path / "modules.py"
    path.write_text("import sys\n\ndef score(name):\n    return name in sys.modules\n")
    with RewardRunner(CustomRewardFn(str(path), "score"), num_workers=1, timeout_s=20) as runner:
        outcomes = runner.run([{"name": "torch"}, {"name": "verl.utils.reward_score"}])
    assert [o.value for o in outcomes] == [False, True]


def test_chunk_with_a_hung_and_a_dying_sample_loses_nothing_else(tmp_path):
    """One worker, 12 samples in chunks of 3: the chunk holding a hang and the one holding a crash give their other
    samples back to the queue, so every other sample is scored once, in order."""
    path = tmp_path / "mixed.py"
    path.write_text(
        "import os\nimport time\n\ndef score(x):\n    if x == 4:\n        time.sleep(30)\n"
        "    if x == 7:\n        os._exit(3)\n    return x * 10\n"
    )
    with RewardRunner(CustomRewardFn(str(path), "score"), num_workers=1, timeout_s=1.5) as runner:
        outcomes = runner.run([{"x": x} for x in range(12)])
        assert runner._chunk_size(12) == 3
    assert [o.value for o in outcomes] == [0, 10, 20, 30, 0.0, 50, 60, 0.0, 80, 90, 100, 110]
    assert outcomes[4].timed_out and "timed out after 1.5 s" in outcomes[4].error
    assert "died (exit code 3)" in outcomes[7].error and not outcomes[7].timed_out
    assert [o.ok for o in outcomes].count(False) == 2


def test_timeout_is_per_sample_not_per_chunk(tmp_path):
    """Results come back once per chunk, but the clock runs per sample: a chunk slower than the timeout whose
    samples are each faster than it is not a timeout."""
    path = tmp_path / "steady.py"
    path.write_text("import time\n\ndef score(x):\n    time.sleep(0.6)\n    return x + 1\n")
    with RewardRunner(CustomRewardFn(str(path), "score"), num_workers=1, timeout_s=1.0) as runner:
        assert runner._chunk_size(8) == 2  # two samples, 1.2 s, per chunk
        outcomes = runner.run([{"x": x} for x in range(8)])
    assert [o.value for o in outcomes] == list(range(1, 9))
    assert all(o.ok for o in outcomes)


def test_unpicklable_function_falls_back_to_in_process(caplog):
    local = 3
    with caplog.at_level(logging.WARNING):
        runner = RewardRunner(lambda x: x + local, num_workers=2)
    assert runner.num_workers == 0 and "scoring in-process" in caplog.text
    assert [o.value for o in runner.run([{"x": 1}])] == [4]


def test_runner_argument_errors():
    with pytest.raises(ValueError, match="reward.num_workers must be >= 0"):
        RewardRunner(batch_scorer, num_workers=-1)
    with pytest.raises(ValueError, match="reward.timeout_s must be > 0"):
        RewardRunner(batch_scorer, timeout_s=0)
