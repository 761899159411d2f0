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


CUSTOM_SERVER = '''
from verl.workers.rollout.hf.server import HFRolloutServer


class CountingServer(HFRolloutServer):
    """The hf engine, counting the requests it serves."""

    def __init__(self, config, model_path=None, **kwargs):
        super().__init__(config, model_path, **kwargs)
        self.requests = 0

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.requests += 1
        return await super().generate(prompt_ids, sampling_params, request_id)


NOT_A_SERVER = object
'''


def _with_custom_server(path, name):
    from _rollout_helpers import rollout_config

    from verl.workers.config.rollout import AgentLoopConfig, CustomAsyncServerConfig

    custom = CustomAsyncServerConfig(path=path and str(path), name=name)
    return rollout_config(agent=AgentLoopConfig(custom_async_server=custom))


def test_custom_async_server_class_serves_the_requests(tmp_path, tiny_causal_lm):
    import asyncio
    import copy

    from verl.workers.rollout import build_server, server_class

    module = tmp_path / "my_server.py"
    module.write_text(CUSTOM_SERVER)
    config = _with_custom_server(module, "CountingServer")
    assert server_class(config).__name__ == "CountingServer"
    assert server_class(_with_custom_server(None, None)) is HFRolloutServer  # unset: rollout.name decides
    replica = build_server(config, model=copy.deepcopy(tiny_causal_lm))
    out = asyncio.run(replica.generate([1, 5, 6], {"temperature": 0.0, "max_tokens": 3}, "r0"))
    assert type(replica).__name__ == "CountingServer" and replica.requests == 1
    assert len(out.token_ids) == 3


def test_bad_custom_async_server_names_the_key(tmp_path):
    from verl.workers.rollout import server_class

    module = tmp_path / "my_server.py"
    module.write_text(CUSTOM_SERVER)
    with pytest.raises(
        AttributeError,
        match=r"rollout server class 'Missing' not found .*"
        r"rollout.agent.custom_async_server.path.*CountingServer",
    ):
        server_class(_with_custom_server(module, "Missing"))
    with pytest.raises(
        TypeError,
        match=r"rollout.agent.custom_async_server.name='NOT_A_SERVER' .* must be a "
        r"subclass of verl.workers.rollout.base.RolloutServer",
    ):
        server_class(_with_custom_server(module, "NOT_A_SERVER"))
