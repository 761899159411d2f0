"""The vLLM and SGLang adapters' engine arguments, built from the rollout config without importing either engine."""

import sys

import pytest

from verl.base_config import ConfigError
from verl.workers.config.rollout import AgentLoopConfig, CustomAsyncServerConfig, RolloutConfig
from verl.workers.rollout.sglang.server import sglang_engine_args
from verl.workers.rollout.vllm.server import vllm_engine_args


def test_vllm_gets_enforce_eager_and_max_num_batched_tokens():
    config = RolloutConfig(
        name="vllm",
        prompt_length=100,
        response_length=28,
        enforce_eager=True,
        max_num_batched_tokens=4096,
        max_num_seqs=64,
        dtype="bfloat16",
    )
    args = vllm_engine_args(config, "/models/m")
    assert args["enforce_eager"] is True and args["max_num_batched_tokens"] == 4096
    assert (args["model"], args["dtype"], args["max_num_seqs"], args["max_model_len"]) == (
        "/models/m",
        "bfloat16",
        64,
        128,
    )
    assert args["enable_sleep_mode"] is True
    assert vllm_engine_args(RolloutConfig(name="vllm"), "/m")["enforce_eager"] is False
    assert "vllm" not in sys.modules  # building the arguments needs no engine


def test_sglang_gets_disable_cuda_graph_and_chunked_prefill_size():
    config = RolloutConfig(name="sglang", enforce_eager=True, max_num_batched_tokens=2048, max_model_len=2000)
    args = sglang_engine_args(config, "/models/m")
    assert args["disable_cuda_graph"] is True and args["chunked_prefill_size"] == 2048
    assert (args["model_path"], args["context_length"]) == ("/models/m", 2000)
    assert "enforce_eager" not in args and "max_num_batched_tokens" not in args  # not SGLang's names
    assert sglang_engine_args(RolloutConfig(name="sglang"), "/m")["disable_cuda_graph"] is False
    assert "sglang" not in sys.modules


@pytest.mark.parametrize("build, name", [(vllm_engine_args, "vllm"), (sglang_engine_args, "sglang")])
def test_engine_kwargs_win_over_the_rollout_keys(build, name):
    batched = {"vllm": "max_num_batched_tokens", "sglang": "chunked_prefill_size"}[name]
    eager = {"vllm": "enforce_eager", "sglang": "disable_cuda_graph"}[name]
    config = RolloutConfig(
        name=name,
        enforce_eager=True,
        max_num_batched_tokens=4096,
        engine_kwargs={name: {batched: 16384, eager: False, "seed": 3}},
    )
    args = build(config, "/m")
    assert (args[batched], args[eager], args["seed"]) == (16384, False, 3)
    assert build(config, "/m", {batched: 1024})[batched] == 1024  # the caller's own arguments come last


def test_data_parallel_size_is_vllm_data_parallel_size_and_sglang_dp_size():
    vllm = vllm_engine_args(RolloutConfig(name="vllm", tensor_model_parallel_size=2, data_parallel_size=4), "/m")
    assert (vllm["tensor_parallel_size"], vllm["data_parallel_size"]) == (2, 4)
    sglang = sglang_engine_args(RolloutConfig(name="sglang", tensor_model_parallel_size=2, data_parallel_size=4), "/m")
    assert (sglang["tp_size"], sglang["dp_size"]) == (2, 4) and "data_parallel_size" not in sglang
    assert vllm_engine_args(RolloutConfig(name="vllm"), "/m")["data_parallel_size"] == 1
    assert sglang_engine_args(RolloutConfig(name="sglang"), "/m")["dp_size"] == 1
    overridden = RolloutConfig(name="vllm", data_parallel_size=4, engine_kwargs={"vllm": {"data_parallel_size": 2}})
    assert vllm_engine_args(overridden, "/m")["data_parallel_size"] == 2
    assert "vllm" not in sys.modules and "sglang" not in sys.modules


def test_hf_engine_refuses_data_parallelism_and_says_what_to_use():
    with pytest.raises(
        ConfigError,
        match=r"^data_parallel_size: is 2, but the hf engine .* more rollout processes "
        r"\(trainer.n_gpus_per_node",
    ):
        RolloutConfig(name="hf", data_parallel_size=2)
    RolloutConfig(name="hf", data_parallel_size=1)
    # a custom server class decides for itself what the key means
    RolloutConfig(
        name="hf",
        data_parallel_size=2,
        agent=AgentLoopConfig(custom_async_server=CustomAsyncServerConfig(path="my.py", name="S")),
    )
