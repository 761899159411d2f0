"""verl.utils.fsdp_utils on a real 2-process gloo group: meta init on rank 1, sharding, loading rank 0's weights,
gathering them back, clipping, LoRA collection; and verl.utils.ulysses with real groups of 1 and 2 ranks."""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

LORA_TARGETS = ["q_proj", "v_proj"]


def _lora_model(model_dir: str) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, init_lora_weights=False)
    return get_peft_model(base, config)


def _sharding_case(rank: int, model_dir: str, mesh) -> dict:
    from torch.distributed.fsdp import FSDPModule

    from verl.utils.fsdp_utils import (
        apply_fsdp2,
        fsdp2_clip_grad_norm_,
        fsdp2_load_full_state_dict,
        fsdp_version,
        get_fsdp_full_state_dict,
        get_init_weight_context_manager,
    )

    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    expected = {k: v.clone() for k, v in reference.state_dict().items()}
    with get_init_weight_context_manager(use_meta_tensor=True, mesh=mesh)():
        model = AutoModelForCausalLM.from_config(reference.config, dtype=torch.float32)
    out: dict = {
        "all_params_meta": all(p.is_meta for p in model.parameters()),
        "any_buffer_meta": any(b.is_meta for b in model.buffers()),
        "version_before": fsdp_version(model),
    }
    apply_fsdp2(model, {"mesh": mesh}, {"forward_prefetch": True})
    out["version_after"] = fsdp_version(model)
    out["units"] = [name for name, m in model.named_modules() if isinstance(m, FSDPModule)]
    fsdp2_load_full_state_dict(model, expected if rank == 0 else {})

    rank0_only = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
    everywhere = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=False)
    out["rank0_only_keys"] = sorted(rank0_only)
    out["everywhere_equal"] = sorted(everywhere) == sorted(expected) and all(
        torch.equal(everywhere[k], v) for k, v in expected.items()
    )
    out["buffers_equal"] = all(torch.equal(b, dict(reference.named_buffers())[n]) for n, b in model.named_buffers())

    ids = torch.arange(3, 15).remainder(reference.config.vocab_size).unsqueeze(0)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    ref_loss = reference(input_ids=ids, labels=ids).loss
    ref_loss.backward()
    out["losses"] = (float(loss), float(ref_loss))
    total = fsdp2_clip_grad_norm_(model.parameters(), max_norm=1e-3)
    ref_total = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=1e-3)
    out["norms"] = (float(total), float(ref_total))
    ref_grads = dict(reference.named_parameters())
    out["max_grad_diff"] = max(
        float((p.grad.full_tensor() - ref_grads[n].grad).abs().max()) for n, p in model.named_parameters()
    )
    return out


def _lora_case(model_dir: str, mesh) -> dict:
    from peft.utils.save_and_load import get_peft_model_state_dict

    from verl.utils.fsdp_utils import apply_fsdp2, collect_lora_params, layered_summon_lora_params

    reference = _lora_model(model_dir)
    adapters = {k: v.detach().clone() for k, v in get_peft_model_state_dict(reference).items()}
    base = {
        k.replace(".base_layer", ""): v.detach().clone()
        for k, v in reference.base_model.model.state_dict().items()
        if "lora_" not in k
    }
    sharded = copy.deepcopy(reference)
    apply_fsdp2(sharded, {"mesh": mesh}, {})

    def same(got: dict, want: dict) -> bool:
        return list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)

    out = {
        "layered": same(layered_summon_lora_params(sharded), adapters),
        "adapters": same(collect_lora_params(sharded, layered_summon=False, base_sync_done=True), adapters),
        "layered_via_collect": same(collect_lora_params(sharded, layered_summon=True, base_sync_done=True), adapters),
        "base": same(collect_lora_params(sharded, layered_summon=False, base_sync_done=False), base),
        "adapter_keys": sorted(adapters),
    }
    try:
        collect_lora_params(sharded, layered_summon=True, base_sync_done=False)
    except ValueError as err:
        out["layered_error"] = str(err)
    return out


def _ulysses_case(rank: int) -> dict:
    import torch.distributed as dist

    from verl.utils import ulysses

    singles = [dist.new_group([0]), dist.new_group([1])]
    out: dict = {}
    try:
        ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
    except ulysses.SequenceParallelNotSupportedError as err:
        out["world_error"] = str(err)
    out["registered_after_refusal"] = ulysses.get_ulysses_sequence_parallel_group() is None
    try:
        ulysses.gather_outputs_and_unpad(torch.ones(4), gather_dim=0, group=dist.group.WORLD)
    except ulysses.SequenceParallelNotSupportedError:
        out["gather_refused"] = True
    ulysses.set_ulysses_sequence_parallel_group(singles[rank])
    try:
        x = torch.arange(10.0).reshape(1, 10)
        out["sp_world_size"] = ulysses.get_ulysses_sequence_parallel_world_size()
        out["sp_rank"] = ulysses.get_ulysses_sequence_parallel_rank()
        out["unpadded"] = ulysses.gather_outputs_and_unpad(x, gather_dim=1, unpad_dim=1, padding_size=3).tolist()
        out["not_unpadded"] = ulysses.gather_outputs_and_unpad(x, gather_dim=1).tolist()
        out["sliced"] = torch.equal(ulysses.slice_input_tensor(x, dim=1), x)
    finally:
        ulysses.set_ulysses_sequence_parallel_group(None)
    return out


def _init_fn_case(rank: int) -> dict:
    from verl.utils.fsdp_utils import init_fn, meta_device_init

    with meta_device_init():
        layer = torch.nn.Linear(3, 2)
    return {"meta_before": layer.weight.is_meta, "meta_after": init_fn(layer).weight.is_meta}


def _worker(rank: int, model_dir: str, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
        result = {
            "sharding": _sharding_case(rank, model_dir, mesh),
            "lora": _lora_case(model_dir, mesh),
            "ulysses": _ulysses_case(rank),
            "init_fn": _init_fn_case(rank),
        }
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("fsdp_utils")
    mp.spawn(_worker, args=(str(tiny_model_dir), str(out / "init"), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def test_rank0_builds_on_cpu_other_ranks_on_meta(results):
    assert results[0]["sharding"]["all_params_meta"] is False
    assert results[1]["sharding"]["all_params_meta"] is True
    assert not any(r["sharding"]["any_buffer_meta"] for r in results)  # rotary buffers stay real


def test_apply_fsdp2_shards_layers_embeddings_and_head(results):
    for result in results:
        sharding = result["sharding"]
        assert (sharding["version_before"], sharding["version_after"]) == (0, 2)
        assert sharding["units"] == ["", "model.embed_tokens", "model.layers.0", "model.layers.1", "lm_head"]


def test_rank0_weights_reach_every_shard_and_gather_back(results):
    assert results[0]["sharding"]["rank0_only_keys"]  # rank 0 holds the gathered dict ...
    assert results[1]["sharding"]["rank0_only_keys"] == []  # ... and only rank 0
    for result in results:
        assert result["sharding"]["everywhere_equal"]
        assert result["sharding"]["buffers_equal"]


def test_sharded_forward_backward_and_clipping_match_unsharded(results):
    for result in results:
        loss, ref_loss = result["sharding"]["losses"]
        assert loss == pytest.approx(ref_loss, rel=1e-5)
        total, ref_total = result["sharding"]["norms"]
        assert total == pytest.approx(ref_total, rel=1e-4)
        assert result["sharding"]["max_grad_diff"] < 1e-6


def test_lora_params_collected_from_sharded_model(results):
    for result in results:
        lora = result["lora"]
        assert lora["layered"] and lora["adapters"] and lora["layered_via_collect"] and lora["base"]
        assert all("lora_A.weight" in k or "lora_B.weight" in k for k in lora["adapter_keys"])
        assert len(lora["adapter_keys"]) == 2 * 2 * len(LORA_TARGETS)  # 2 layers x (A, B) x targets
        assert "base_sync_done" in lora["layered_error"]


def test_ulysses_accepts_one_rank_groups_and_refuses_larger(results):
    for result in results:
        uly = result["ulysses"]
        assert "sequence-parallel size 2" in uly["world_error"]
        assert uly["registered_after_refusal"] and uly["gather_refused"]
        assert (uly["sp_world_size"], uly["sp_rank"]) == (1, 0)
        assert uly["unpadded"] == [list(range(7))]
        assert uly["not_unpadded"] == [list(map(float, range(10)))]
        assert uly["sliced"]


def test_init_fn_materialises_meta_modules_off_rank0(results):
    assert results[0]["init_fn"] == {"meta_before": True, "meta_after": True}
    assert results[1]["init_fn"] == {"meta_before": True, "meta_after": False}
