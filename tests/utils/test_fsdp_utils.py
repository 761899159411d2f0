"""verl.utils.fsdp_utils helpers that need no process group: versions, FSDP1 refusal, wrap policies, shard
placement, CPU no-op moves, gradient detaching, LoRA names."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.tensor import Shard

from verl.utils import fsdp_utils
from verl.utils.fsdp_utils import offload


class _Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)


class _Model(nn.Module):
    _no_split_modules = ["_Layer"]

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([_Layer(), _Layer()])


def _fsdp1_object() -> FullyShardedDataParallel:
    return FullyShardedDataParallel.__new__(FullyShardedDataParallel)  # an FSDP1 instance, never initialised


def test_fsdp_version_of_plain_module():
    assert fsdp_utils.fsdp_version(_Model()) == 0
    assert fsdp_utils.fsdp_version(_fsdp1_object()) == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda m: fsdp_utils.offload_fsdp_model_to_cpu(m),
        lambda m: fsdp_utils.load_fsdp_model_to_gpu(m),
        lambda m: fsdp_utils.get_fsdp_full_state_dict(m),
        lambda m: fsdp_utils.get_fsdp_state_ctx(m, None, None, None),
        lambda m: fsdp_utils.collect_lora_params(m, False, True),
        lambda m: fsdp_utils.offload_fsdp_grad(m),
    ],
)
def test_fsdp1_modules_are_refused_by_name(call):
    with pytest.raises(TypeError, match="FSDP1 FullyShardedDataParallel.*FSDP2 only"):
        call(_fsdp1_object())


def test_torch_names_are_reexported():
    from torch.distributed import fsdp

    for name in ("FSDPModule", "MixedPrecisionPolicy", "CPUOffloadPolicy", "fully_shard"):
        assert getattr(fsdp_utils, name) is getattr(fsdp, name)


def test_wrap_policy_wraps_the_decoder_layers():
    model = _Model()
    policy = fsdp_utils.get_fsdp_wrap_policy(model)
    assert policy(module=model.layers[0], recurse=False, nonwrapped_numel=0)
    assert not policy(module=model.embed, recurse=False, nonwrapped_numel=0)
    assert fsdp_utils.get_fsdp_wrap_policy(model, {"disable": True}) is None


def test_wrap_policy_by_size_and_for_lora_leaves():
    model = _Model()
    by_size = fsdp_utils.get_fsdp_wrap_policy(model, {"min_num_params": 30})
    assert by_size(module=model.embed, recurse=False, nonwrapped_numel=40)
    assert not by_size(module=model.embed, recurse=False, nonwrapped_numel=20)
    lora = fsdp_utils.get_fsdp_wrap_policy(model, {}, is_lora=True)
    model.layers[0].proj.requires_grad_(False)
    assert not lora(module=model.layers[0].proj, recurse=False, nonwrapped_numel=0)
    assert lora(module=model.layers[1].proj, recurse=False, nonwrapped_numel=0)  # trainable leaf


def test_wrap_policy_names_unknown_layer_classes():
    with pytest.raises(ValueError, match="transformer_layer_cls_to_wrap.*LlamaDecoderLayer"):
        fsdp_utils.get_fsdp_wrap_policy(_Model(), {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})


def test_shard_placement_picks_first_divisible_dim():
    place = fsdp_utils.get_shard_placement_fn(4)
    assert place(torch.empty(6, 8)) == Shard(1)
    assert place(torch.empty(8, 6)) == Shard(0)
    assert place(torch.empty(3, 5)) == Shard(0)


def test_moves_to_where_the_data_already_is_are_noops():
    model = _Model()
    optimizer = torch.optim.AdamW(model.parameters())
    model.embed(torch.tensor([1, 2])).sum().backward()
    optimizer.step()
    weight = model.embed.weight
    fsdp_utils.offload_fsdp_model_to_cpu(model)
    fsdp_utils.load_fsdp_model_to_gpu(model)
    fsdp_utils.offload_fsdp_optimizer(optimizer)
    fsdp_utils.load_fsdp_optimizer(optimizer, 0)  # an accelerator index means the CPU on a CPU-only machine
    fsdp_utils.offload_fsdp_grad(model)  # host gradients stay attached
    fsdp_utils.offload_fsdp_param_and_grad(model, offload_grad=False)
    fsdp_utils.load_fsdp_param_and_grad(model, 0, load_grad=False)
    assert model.embed.weight is weight and weight.grad is not None
    assert all(v.device.type == "cpu" for s in optimizer.state.values() for v in s.values())
    assert offload.detached_grads(model) == {}


def test_detached_gradients_are_reattached_and_added_to_new_ones():
    model = _Model()
    model.embed.weight.grad = torch.ones_like(model.embed.weight)
    offload._detach(model, "embed.weight", model.embed.weight, None)
    assert model.embed.weight.grad is None and set(offload.detached_grads(model)) == {"embed.weight"}
    model.embed.weight.grad = torch.full_like(model.embed.weight, 2.0)  # a backward pass meanwhile
    fsdp_utils.load_fsdp_grad(model, 0)
    assert torch.equal(model.embed.weight.grad, torch.full_like(model.embed.weight, 3.0))
    assert offload.detached_grads(model) == {}


def test_replace_lora_wrapper_and_normalized_names():
    config = LoraConfig(target_modules=["q_proj", "dense"], exclude_modules=["model.layers.1.self_attn.q_proj"])
    assert (
        fsdp_utils.replace_lora_wrapper("model.layers.0.mlp.dense.weight", config)
        == "model.layers.0.mlp.dense.base_layer.weight"
    )
    assert (
        fsdp_utils.replace_lora_wrapper("model.layers.0.self_attn.k_proj.bias", config)
        == "model.layers.0.self_attn.k_proj.base_layer.bias"
    )  # a stacked projection
    assert (
        fsdp_utils.replace_lora_wrapper("model.layers.1.self_attn.q_proj.weight", config)
        == "model.layers.1.self_attn.q_proj.weight"
    )  # excluded
    assert fsdp_utils.replace_lora_wrapper("model.norm.weight", config) == "model.norm.weight"
    params = {
        "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight": 1,
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight": 2,
        "base_model.model.lm_head.weight": 3,
    }
    assert fsdp_utils.normalize_peft_param_name(params) == {
        "model.layers.0.self_attn.q_proj.weight": 1,
        "lm_head.weight": 3,
    }


def test_init_context_on_a_single_process_builds_real_weights():
    with fsdp_utils.get_init_weight_context_manager(use_meta_tensor=True)():
        layer = nn.Linear(2, 2)
    assert not layer.weight.is_meta
    with fsdp_utils.meta_device_init():
        tied = _Model()
        tied.register_buffer("scale", torch.ones(2))
        tied.layers[1].proj.weight = tied.layers[0].proj.weight
    assert tied.embed.weight.is_meta and not tied.scale.is_meta
    assert tied.layers[1].proj.weight is tied.layers[0].proj.weight


def test_clip_grad_norm_matches_torch_on_plain_tensors():
    a, b = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(4))
    a.grad, b.grad = torch.full((3,), 2.0), torch.full((4,), 2.0)
    total = fsdp_utils.fsdp2_clip_grad_norm_([a, b], max_norm=1.0)
    assert float(total) == pytest.approx(2.0 * 7**0.5)
    assert float(torch.cat([a.grad, b.grad]).norm()) == pytest.approx(1.0, rel=1e-4)
