"""rollout.name registry: built-in hf, lazy optional engines with install hints, custom engines."""

from __future__ import annotations

import importlib.util

import pytest

from verl.workers.rollout import RolloutServer, get_rollout_class, list_rollouts, register_rollout
from verl.workers.rollout.hf.server import HFRolloutServer


def test_hf_is_built_in_and_all_names_listed():
    assert get_rollout_class("hf") is HFRolloutServer
    assert {"hf", "vllm", "sglang"} <= set(list_rollouts())


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_missing_optional_engine_names_the_extra(name):
    if importlib.util.find_spec(name) is not None:
        pytest.skip(f"{name} is installed here")
    with pytest.raises(ImportError, match=rf"rollout.name='{name}'.*pip install verl\[{name}\]"):
        get_rollout_class(name)


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match=r"rollout.name='vlm' is not a known rollout engine; known: hf, sglang, vllm"):
        get_rollout_class("vlm")


def test_register_custom_engine_and_reject_conflicts():
    @register_rollout("test-echo")
    class Echo(RolloutServer):
        pass

    assert get_rollout_class("test-echo") is Echo
    with pytest.raises(ValueError, match="rollout.name='test-echo' is already registered"):

        @register_rollout("test-echo")
        class Other(RolloutServer):
            pass

    with pytest.raises(TypeError, match="not a RolloutServer subclass"):
        register_rollout("test-bad")(object)


def test_optional_engine_without_gpu_says_so():
    import torch

    from verl.workers.rollout.adapter_utils import require_engine

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(RuntimeError, match=r"rollout.name='vllm' needs a CUDA GPU.*use rollout.name=hf"):
        require_engine("json", "vllm")  # a package that exists, so only the GPU check can fail


def test_pause_gate_of_adapters_waits_and_times_out_by_request():
    import asyncio

    from verl.workers.rollout.adapter_utils import PauseGate, finish_reason_to_stop_reason

    async def run():
        gate = PauseGate(timeout_s=0.05)
        await gate.wait("free")
        gate.set(paused=True)
        waiter = asyncio.create_task(gate.wait("held"))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        gate.set(paused=False)
        await waiter
        gate.set(sleeping=True)
        await gate.wait("req-9")

    with pytest.raises(TimeoutError, match="request req-9: the rollout server stayed asleep"):
        asyncio.run(run())
    assert [finish_reason_to_stop_reason(r) for r in ("abort", {"type": "length"}, "stop", None)] == [
        "aborted",
        "length",
        "stop",
        "stop",
    ]
