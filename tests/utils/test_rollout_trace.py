"""verl.utils.rollout_trace: a plain call without a backend; with one, each call is recorded with its
trajectory, unless the trajectory is excluded."""

from __future__ import annotations

import asyncio

import pytest

from verl.utils.extras import MissingExtraError
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op


class _FakeWeave:
    def __init__(self):
        self.calls = []

    def create_call(self, op, inputs, attributes):
        call = {"op": op, "inputs": inputs, "attributes": attributes}
        self.calls.append(call)
        return call

    def finish_call(self, call, output=None, exception=None):
        call["output"], call["exception"] = output, exception


class _Tokenizer:
    def decode(self, ids):
        return "".join(chr(96 + i) for i in ids)


class _Loop:
    tokenizer = _Tokenizer()

    @rollout_trace_op
    async def generate(self, prompt_ids, temperature=1.0):
        return {"token_ids": [3, 4]}

    @rollout_trace_op
    def fail(self, x):
        raise ValueError("boom")


@pytest.fixture
def weave():
    RolloutTraceConfig.reset()
    config = RolloutTraceConfig.get_instance()
    client = _FakeWeave()
    config.backend, config.client, config.experiment_name = "weave", client, "exp"
    yield client
    RolloutTraceConfig.reset()


def test_without_backend_calls_run_untraced():
    RolloutTraceConfig.reset()
    assert asyncio.run(_Loop().generate([1, 2])) == {"token_ids": [3, 4]}
    assert RolloutTraceConfig.get_backend() is None


def test_calls_are_recorded_with_inputs_output_and_trajectory(weave):
    with rollout_trace_attr(sample_index=5, step=2, rollout_n=1):
        asyncio.run(_Loop().generate([1, 2]))
    (call,) = weave.calls
    assert call["op"] == "_Loop.generate"
    assert call["inputs"] == {"prompt_ids": [1, 2], "temperature": 1.0}
    assert call["attributes"] == {
        "sample_index": 5,
        "step": 2,
        "rollout_n": 1,
        "validate": False,
        "experiment_name": "exp",
    }
    assert call["output"] == {"token_ids": [3, 4]}


def test_token2text_and_exceptions(weave):
    RolloutTraceConfig.get_instance().token2text = True
    asyncio.run(_Loop().generate([1, 2]))
    assert weave.calls[0]["output"] == {"token_ids": [3, 4], "prompt_text": "ab", "response_text": "cd"}
    with pytest.raises(ValueError, match="boom"):
        _Loop().fail(1)
    assert isinstance(weave.calls[1]["exception"], ValueError)


def test_excluded_trajectories_are_not_recorded(weave):
    with rollout_trace_attr(sample_index=1, step=1, trace=False):
        asyncio.run(_Loop().generate([1]))
    assert weave.calls == []


def test_init_validates_backend_and_needs_its_package():
    RolloutTraceConfig.reset()
    with pytest.raises(ValueError, match="backend must be one of"):
        RolloutTraceConfig.init("p", "e", backend="jaeger")
    RolloutTraceConfig.reset()
    with pytest.raises(MissingExtraError, match="mlflow"):
        RolloutTraceConfig.init("p", "e", backend="mlflow")
    RolloutTraceConfig.reset()
    RolloutTraceConfig.init("p", "e", backend=None)
    assert RolloutTraceConfig.get_backend() is None and RolloutTraceConfig.get_instance().project_name == "p"
    RolloutTraceConfig.reset()
