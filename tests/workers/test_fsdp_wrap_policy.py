"""fsdp_config.wrap_policy picks the modules FSDP2 shards on their own; forward_prefetch chains them, same results.

The sharding runs on a real 2-process gloo group (``torch.multiprocessing``), like the trainer's workers on CPU.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from verl.base_config import ConfigError
from verl.workers.config.engine import FSDPEngineConfig
from verl.workers.fsdp.fsdp_wrap import layers_to_shard

POLICIES = {
    "default": {"min_num_params": 0},
    "by_class_and_size": {"transformer_layer_cls_to_wrap": ["LlamaAttention", "LlamaMLP"], "min_num_params": 20000},
    "nested": {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer", "LlamaMLP"]},
    "none_big_enough": {"min_num_params": 10**9},
}


def _sharded_names(model: torch.nn.Module) -> list[str]:
    from torch.distributed.fsdp import FSDPModule

    return [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]


def _loss_and_grads(model: torch.nn.Module, rank: int) -> tuple[float, dict[str, torch.Tensor]]:
    ids = torch.arange(1 + rank, 11 + rank).remainder(model.config.vocab_size).unsqueeze(0)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return float(loss), {n: p.grad.full_tensor() for n, p in model.named_parameters()}


def _prefetch_matrix(model: torch.nn.Module) -> list[list[bool]]:
    """Row i, column j: decoder layer i prefetches layer j in forward. FSDP2 has no getter for what
    ``set_modules_to_forward_prefetch`` stored, so this reads the FSDP state it writes."""
    layers = list(model.model.layers)
    rows = []
    for layer in layers:
        targets = layer._get_fsdp_state()._states_to_forward_prefetch or []
        rows.append([any(t is other._get_fsdp_state() for t in targets) for other in layers])
    return rows


def _worker(rank: int, model_dir: str, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from verl.workers.fsdp.fsdp_wrap import apply_fsdp2

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))

        def load() -> torch.nn.Module:
            return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

        result: dict = {"sharded": {}}
        for case, policy in POLICIES.items():
            result["sharded"][case] = _sharded_names(apply_fsdp2(load(), mesh, wrap_policy=policy))
        try:
            apply_fsdp2(
                load(),
                mesh,
                wrap_policy={"transformer_layer_cls_to_wrap": ["LlamaDecoderLayr"]},
                key="actor.fsdp_config",
            )
        except ValueError as exc:
            result["error"] = str(exc)
        plain = apply_fsdp2(load(), mesh, forward_prefetch=False)
        prefetching = apply_fsdp2(load(), mesh, forward_prefetch=True)
        result["prefetch"] = {"plain": _prefetch_matrix(plain), "prefetching": _prefetch_matrix(prefetching)}
        result["plain"] = _loss_and_grads(plain, rank)
        result["prefetching"] = _loss_and_grads(prefetching, rank)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("wrap_policy")
    mp.spawn(_worker, args=(str(tiny_model_dir), str(out / "init"), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def test_wrap_policy_picks_the_sharded_modules(results):
    layers = ["model.layers.0", "model.layers.1"]
    for result in results:
        sharded = result["sharded"]
        assert sharded["default"] == ["", *layers]
        assert sharded["by_class_and_size"] == ["", "model.layers.0.mlp", "model.layers.1.mlp"]
        assert sharded["nested"] == ["", "model.layers.0", "model.layers.0.mlp", "model.layers.1", "model.layers.1.mlp"]
        assert sharded["none_big_enough"] == [""]


def test_an_unknown_layer_class_names_the_key_and_the_model_classes(results, tiny_model_dir):
    for result in results:
        assert "actor.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap: ['LlamaDecoderLayr']" in result["error"]
        assert "'LlamaDecoderLayer'" in result["error"] and "'LlamaMLP'" in result["error"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match=r"critic.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap: \['Nope'\]"):
        layers_to_shard(model, {"transformer_layer_cls_to_wrap": "Nope"}, key="critic.fsdp_config.wrap_policy")


def test_forward_prefetch_chains_the_layers_with_the_same_loss_and_grads(results):
    for result in results:
        assert result["prefetch"]["plain"] == [[False, False], [False, False]]
        assert result["prefetch"]["prefetching"] == [[False, True], [False, False]]
        (loss, grads), (loss_p, grads_p) = result["plain"], result["prefetching"]
        assert loss == loss_p
        assert grads.keys() == grads_p.keys()
        for name in grads:
            torch.testing.assert_close(grads_p[name], grads[name], atol=1e-6, rtol=1e-6)


def test_bad_wrap_policy_keys_fail_in_the_config():
    with pytest.raises(ConfigError, match=r"wrap_policy: unknown key\(s\) \['min_params'\]"):
        FSDPEngineConfig(wrap_policy={"min_params": 3})
    with pytest.raises(ConfigError, match="wrap_policy.min_num_params: must be an integer >= 0"):
        FSDPEngineConfig(wrap_policy={"min_num_params": -1})
    with pytest.raises(ConfigError, match="wrap_policy.transformer_layer_cls_to_wrap: must be a list"):
        FSDPEngineConfig(wrap_policy={"transformer_layer_cls_to_wrap": [3]})
