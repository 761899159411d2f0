"""verl's replica lookup (RolloutMode, get_rollout_replica_class) and the BaseRollout adapter contract."""

from __future__ import annotations

import asyncio

import pytest
from _rollout_helpers import reference_greedy, rollout_config
from omegaconf import OmegaConf

from verl.utils.extras import MissingExtraError, is_package_available
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout import StandaloneReplica
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf.server import HFRolloutServer
from verl.workers.rollout.replica import RolloutMode, WorkerRankReplica, get_rollout_replica_class


def test_each_replica_says_where_its_engine_runs():
    assert RolloutMode("hybrid") is RolloutMode.HYBRID and RolloutMode.COLOCATED.value == "colocated"
    assert HFRolloutServer.rollout_mode is RolloutMode.HYBRID  # a server in this process is its own replica
    assert WorkerRankReplica.rollout_mode is RolloutMode.HYBRID
    assert StandaloneReplica.rollout_mode is RolloutMode.STANDALONE


def test_replica_classes_by_engine_name():
    from verl.workers.rollout.hf.replica import HFReplica
    from verl.workers.rollout.sglang_rollout.async_sglang_server import SGLangReplica
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica

    assert get_rollout_replica_class("hf") is HFReplica
    assert get_rollout_replica_class("vllm") is vLLMReplica and get_rollout_replica_class("sglang") is SGLangReplica
    assert all(issubclass(cls, StandaloneReplica) for cls in (HFReplica, vLLMReplica, SGLangReplica))
    with pytest.raises(ValueError, match=r"rollout.name='mystery' has no replica class; known: \['hf'"):
        get_rollout_replica_class("mystery")
    with pytest.raises(MissingExtraError, match="TensorRT-LLM"):
        get_rollout_replica_class("trtllm")
    with pytest.raises(MissingExtraError, match="disaggregation"):
        get_rollout_replica_class("vllm", disaggregation_enabled=True)


@pytest.mark.skipif(is_package_available("vllm"), reason="vLLM is installed")
def test_vllm_replica_without_vllm_names_the_extra():
    with pytest.raises(MissingExtraError, match=r"verl\[vllm\]"):
        get_rollout_replica_class("vllm")(0, rollout_config(name="vllm"), HFModelConfig(local_path="/x"))


@pytest.mark.ray
def test_hf_replica_serves_the_model_from_verl_arguments(ray_cluster, tiny_model_dir, tiny_causal_lm):
    replica_cls = get_rollout_replica_class("hf")
    replica = replica_cls(
        3,
        rollout_config(),
        HFModelConfig(local_path=str(tiny_model_dir)),
        gpus_per_node=1,
        server_kwargs={"device": "cpu"},
    )
    try:
        out = asyncio.run(replica.generate([3, 4, 5], {"temperature": 0.0, "ignore_eos": True, "max_tokens": 5}, "r"))
    finally:
        replica.kill()
    assert replica.replica_rank == 3 and replica.rollout_mode is RolloutMode.STANDALONE
    assert out.token_ids == reference_greedy(tiny_causal_lm, [3, 4, 5], 5)


class _RecordingAdapter(BaseRollout):
    """A minimal adapter: what a recipe writes to plug an engine into the worker flow."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = []

    async def resume(self, tags):
        self.events.append(("resume", tuple(tags)))

    async def update_weights(self, weights, wire_format="named_tensors", **kwargs):
        self.events.append(("update", [name for name, _ in weights], wire_format))

    async def release(self):
        self.events.append(("release",))


def test_base_rollout_types_untyped_configs_and_drives_the_adapter():
    rollout = OmegaConf.create({"name": "hf", "prompt_length": 16, "response_length": 8})
    adapter = _RecordingAdapter(rollout, {"path": "verl:tiny-demo"}, device_mesh=None)
    assert isinstance(adapter.config, RolloutConfig) and adapter.config.response_length == 8
    assert isinstance(adapter.model_config, HFModelConfig) and adapter.model_config.path == "verl:tiny-demo"
    typed = RolloutConfig(name="hf")
    assert _RecordingAdapter(typed, adapter.model_config).config is typed

    async def cycle():
        await adapter.release()
        await adapter.update_weights([("w", None)])
        await adapter.resume(["weights", "kv_cache"])

    asyncio.run(cycle())
    assert adapter.events == [("release",), ("update", ["w"], "named_tensors"), ("resume", ("weights", "kv_cache"))]
    with pytest.raises(NotImplementedError, match="_RecordingAdapter generates through its rollout replicas"):
        adapter.generate_sequences(None)
    with pytest.raises(TypeError, match="abstract"):
        BaseRollout(typed, adapter.model_config)
