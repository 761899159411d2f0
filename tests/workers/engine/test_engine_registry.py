"""EngineRegistry lookup and the micro-batching helpers of the engines (no process group needed)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.config_builder import as_config
from verl.utils.extras import MissingExtraError
from verl.workers.config import EngineConfig, FSDPEngineConfig
from verl.workers.engine import BaseEngine, EngineRegistry, FSDPEngineWithLMHead, FSDPEngineWithValueHead
from verl.workers.engine.utils import as_engine_config, postprocess_batch_func, prepare_micro_batches


def test_fsdp_engines_are_registered_for_cpu_and_cuda(monkeypatch):
    for device in ("cpu", "cuda"):
        monkeypatch.setenv("VERL_ENGINE_DEVICE", device)
        for backend in ("fsdp", "fsdp2"):
            assert EngineRegistry.get_engine_cls("language_model", backend) is FSDPEngineWithLMHead
            assert EngineRegistry.get_engine_cls("value_model", backend) is FSDPEngineWithValueHead


def test_unknown_lookups_name_what_is_known(monkeypatch):
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cpu")
    with pytest.raises(ValueError, match="model_type='diffusion'"):
        EngineRegistry.get_engine_cls("diffusion", "fsdp")
    with pytest.raises(ValueError, match="backend='deepspeed'.*fsdp"):
        EngineRegistry.get_engine_cls("language_model", "deepspeed")
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "npu")
    with pytest.raises(ValueError, match="device='npu'"):
        EngineRegistry.get_engine_cls("language_model", "fsdp")


@pytest.mark.parametrize("backend", ["megatron", "torchtitan"])
def test_backends_not_in_this_build_fail_by_name(monkeypatch, backend):
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cpu")
    with pytest.raises(MissingExtraError, match="not part of this build"):
        EngineRegistry.new("language_model", backend, None, None, None, None)


def test_register_rejects_a_second_class_for_the_same_slot(monkeypatch):
    monkeypatch.setattr(EngineRegistry, "_engines", {})

    @EngineRegistry.register("toy", "b", device=["cpu"], vendor=["v1", "v2"])
    class Toy(BaseEngine):
        pass

    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cpu")
    monkeypatch.setenv("VERL_ENGINE_VENDOR", "v2")
    assert EngineRegistry.get_engine_cls("toy", "b") is Toy
    with pytest.raises(ValueError, match="already registered"):
        EngineRegistry.register("toy", "b", device="cpu", vendor="v1")(type("Other", (BaseEngine,), {}))
    with pytest.raises(TypeError, match="not a BaseEngine"):
        EngineRegistry.register("toy", "c")(object)


def test_as_engine_config_types_an_engine_config_as_the_backend_class():
    # what a TrainingWorker makes of a plain mapping: the common fields, the backend's keys kept aside
    common = as_config({"strategy": "fsdp2", "fsdp_size": 2, "use_dynamic_bsz": False}, EngineConfig, "engine_config")
    fsdp = as_engine_config(common, FSDPEngineConfig)
    assert type(fsdp) is FSDPEngineConfig and fsdp.strategy == "fsdp2"
    assert fsdp.fsdp_size == 2 and fsdp.use_dynamic_bsz is False
    given = FSDPEngineConfig(param_offload=True)
    assert as_engine_config(given, FSDPEngineConfig) is given
    assert as_engine_config(None, FSDPEngineConfig) == FSDPEngineConfig()


def nested_batch(lengths: list[int]) -> TensorDict:
    rows = [torch.arange(n) + 10 * i for i, n in enumerate(lengths)]
    data = TensorDict(
        {"input_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged), "row": torch.arange(len(lengths))},
        batch_size=[len(lengths)],
    )
    return data


def test_fixed_micro_batches_keep_order():
    data = nested_batch([3, 5, 2, 4, 1])
    tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=2)
    micro, indices = prepare_micro_batches(data)
    assert indices is None
    assert [m["row"].tolist() for m in micro] == [[0, 1], [2, 3], [4]]
    assert [r.tolist() for r in micro[1]["input_ids"].unbind()] == [[20, 21], [30, 31, 32, 33]]


def test_dynamic_micro_batches_respect_the_token_budget_and_restore_order():
    lengths = [6, 2, 5, 3, 4]
    data = nested_batch(lengths)
    tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=8)
    micro, indices = prepare_micro_batches(data)
    assert sorted(i for part in indices for i in part) == list(range(5))
    for m, part in zip(micro, indices):
        assert m["row"].tolist() == part
        assert int(m["input_ids"].offsets()[-1]) <= 8
    outputs = [
        {"model_output": {"ids": m["input_ids"] * 1}, "loss": 0.5, "metrics": {"m": [float(len(m))]}} for m in micro
    ]
    merged = postprocess_batch_func(outputs, indices, data)
    assert [r.tolist() for r in merged["model_output"]["ids"].unbind()] == [
        r.tolist() for r in data["input_ids"].unbind()
    ]
    assert merged["loss"] == [0.5] * len(micro) and sum(merged["metrics"]["m"]) == 5


def test_dynamic_micro_batches_need_a_budget():
    data = nested_batch([2, 2])
    tu.assign_non_tensor(data, use_dynamic_bsz=True)
    with pytest.raises(ValueError, match="max_token_len_per_gpu"):
        prepare_micro_batches(data)
