"""model.use_fused_kernels under FSDP2: the swapped head reads the weight FSDP gathered for the root's forward and
its gradient is reduced like any other, on a real 2-process gloo group, with the unfused path's results."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

ROWS, PROMPT_LEN, RESPONSE_LEN = 3, 4, 5


def _micro_batch(vocab_size: int, rank: int):
    from tensordict import TensorDict

    from verl.utils.torch_functional import compute_position_id_with_mask

    gen = torch.Generator().manual_seed(10 + rank)
    ids = torch.randint(1, vocab_size, (ROWS, PROMPT_LEN + RESPONSE_LEN), generator=gen)
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :2] = 0
    attention_mask[1, -1:] = 0
    return TensorDict(
        {
            "responses": ids[:, PROMPT_LEN:],
            "input_ids": ids,
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
        },
        batch_size=[ROWS],
    )


def _run(model_dir: str, mesh, rank: int, fused: bool) -> dict:
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.config.actor import FSDPActorConfig
    from verl.workers.fsdp.fsdp_wrap import apply_fsdp2

    torch.manual_seed(0)
    model = apply_fsdp2(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), mesh)
    config = FSDPActorConfig(ppo_mini_batch_size=ROWS, ppo_micro_batch_size_per_gpu=ROWS, use_fused_kernels=fused)
    actor = DataParallelPPOActor(config, model)
    log_probs, entropy = actor._forward_responses(
        _micro_batch(model.config.vocab_size, rank), temperature=0.9, calculate_entropy=True, entropy_grad=True
    )
    (log_probs.sum() - 0.1 * entropy.sum()).backward()
    return {
        "log_probs": log_probs.detach(),
        "entropy": entropy.detach(),
        "grads": {name: p.grad.full_tensor() for name, p in model.named_parameters()},
    }


def _worker(rank: int, model_dir: str, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        result = {"plain": _run(model_dir, mesh, rank, False), "fused": _run(model_dir, mesh, rank, True)}
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("fused_fsdp")
    mp.spawn(_worker, args=(str(tiny_model_dir), str(out / "init"), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def test_sharded_fused_head_matches_the_unfused_values_and_reduced_gradients(results):
    for result in results:
        plain, fused = result["plain"], result["fused"]
        torch.testing.assert_close(fused["log_probs"], plain["log_probs"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(fused["entropy"], plain["entropy"], atol=1e-5, rtol=1e-5)
        assert fused["grads"].keys() == plain["grads"].keys()
        assert plain["grads"]["lm_head.weight"].abs().max() > 0
        for name, grad in plain["grads"].items():
            torch.testing.assert_close(fused["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    # the gradients are the reduced ones: both ranks hold the same, though each scored its own rows
    assert not torch.equal(results[0]["plain"]["log_probs"], results[1]["plain"]["log_probs"])
    for name, grad in results[0]["fused"]["grads"].items():
        torch.testing.assert_close(results[1]["fused"]["grads"][name], grad, msg=name)
