"""The FSDP engine on a 2-process gloo group with the tiny model: sharded log-probs, entropy and values equal a
plain forward of the unsharded model in every layout (packed, padded, dynamic micro-batches), a PPO step trains the
same model on both ranks, and checkpoints restore it."""

from __future__ import annotations

import functools
import os

import pytest
import torch
import torch.multiprocessing as mp

P, R = 5, 3


def make_batch(vocab: int, rows: int = 4, seed: int = 0):
    from tensordict import TensorDict

    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (rows, P), generator=gen)
    responses = torch.randint(3, vocab, (rows, R), generator=gen)
    attention_mask = torch.ones(rows, P + R, dtype=torch.long)
    attention_mask[0, :2] = 0
    attention_mask[1, -1] = 0
    return TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention_mask,
            "position_ids": torch.clamp(attention_mask.cumsum(-1) - 1, min=0),
            "response_mask": attention_mask[:, P:].clone(),
            "advantages": torch.ones(rows, R),
            "old_log_probs": torch.zeros(rows, R),
            "values": torch.zeros(rows, R),
            "returns": torch.ones(rows, R),
        },
        batch_size=[rows],
    )


def engine_batch(vocab: int, rank: int, **settings):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    data = left_right_2_no_padding(make_batch(vocab)[rank * 2 : rank * 2 + 2])
    tu.assign_non_tensor(
        data,
        **{
            "use_dynamic_bsz": False,
            "micro_batch_size_per_gpu": 1,
            "temperature": 1.0,
            "calculate_entropy": True,
            **settings,
        },
    )
    return data


def _worker(rank: int, model_dir: str, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.workers.config import ActorConfig, CheckpointConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine import EngineRegistry
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        model_config = HFModelConfig(path=model_dir, use_remove_padding=True)
        engine = EngineRegistry.new(
            "language_model",
            "fsdp",
            model_config,
            FSDPEngineConfig(),
            FSDPOptimizerConfig(lr=1e-2, clip_grad=1.0),
            CheckpointConfig(),
        )
        engine.initialize()
        vocab = engine.hf_config.vocab_size
        result: dict = {"sharded": type(next(engine.module.parameters())).__name__}
        for name, settings in {
            "packed": {},
            "padded": {"use_remove_padding": False},
            "dynamic": {"use_dynamic_bsz": True, "max_token_len_per_gpu": 9},
        }.items():
            data = engine_batch(vocab, rank, **settings)
            with engine.eval_mode():
                out = engine.infer_batch(data)["model_output"]
            result[name] = (no_padding_2_padding(out["log_probs"], data), no_padding_2_padding(out["entropy"], data))
        loss_fn = functools.partial(ppo_loss, ActorConfig(ppo_mini_batch_size=4))
        data = engine_batch(vocab, rank, global_batch_size=4)
        with engine.train_mode():
            trained = engine.train_batch(data, loss_fn)
        result["grad_norm"] = trained["metrics"]["grad_norm"]
        result["lr"] = engine.lr_scheduler_step()
        weights = dict(engine.get_per_tensor_param()[0])
        result["weights"] = {k: v.clone() for k, v in weights.items()}
        engine.save_checkpoint(os.path.join(out_dir, "ckpt"), global_step=1)
        with engine.train_mode():
            engine.train_batch(engine_batch(vocab, rank, global_batch_size=4), loss_fn)
        engine.load_checkpoint(os.path.join(out_dir, "ckpt"))
        restored = dict(engine.get_per_tensor_param()[0])
        result["restored"] = all(torch.equal(restored[k], result["weights"][k]) for k in restored)

        critic = EngineRegistry.new(
            "value_model", "fsdp2", model_config, FSDPEngineConfig(forward_only=True), None, CheckpointConfig()
        )
        critic.initialize()
        data = engine_batch(vocab, rank)
        with critic.eval_mode():
            values = critic.infer_batch(data)["model_output"]["values"]
        result["values"] = no_padding_2_padding(values, data)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def reference(model_dir: str, vocab: int):
    from transformers import AutoModelForCausalLM

    from verl.utils.torch_functional import entropy_from_logits

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = make_batch(vocab)
    with torch.no_grad():
        logits = (
            model(input_ids=data["input_ids"], attention_mask=data["attention_mask"], position_ids=data["position_ids"])
            .logits[:, P - 1 : -1]
            .float()
        )
    mask = data["response_mask"].float()
    log_probs = torch.log_softmax(logits, -1).gather(-1, data["responses"].unsqueeze(-1)).squeeze(-1)
    return log_probs * mask, entropy_from_logits(logits) * mask, mask


@pytest.mark.timeout(600)
def test_fsdp_engine_on_two_ranks(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    mp.spawn(_worker, args=(str(tiny_model_dir), str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    vocab = AutoConfig.from_pretrained(tiny_model_dir).vocab_size
    ref_log_probs, ref_entropy, mask = reference(str(tiny_model_dir), vocab)
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
    for rank, result in enumerate(results):
        assert result["sharded"] == "DTensor"
        rows = slice(rank * 2, rank * 2 + 2)
        for layout in ("packed", "padded", "dynamic"):
            log_probs, entropy = result[layout]
            torch.testing.assert_close(log_probs * mask[rows], ref_log_probs[rows], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(entropy * mask[rows], ref_entropy[rows], atol=1e-4, rtol=1e-4)
        assert result["values"].shape == (2, R)
        assert torch.isfinite(torch.tensor(result["grad_norm"])) and result["grad_norm"] > 0
        assert result["lr"] == pytest.approx(1e-2)
        assert result["restored"]
    # both ranks hold the same (full) weights after the step, and the step changed them
    for name, tensor in results[0]["weights"].items():
        assert torch.equal(tensor, results[1]["weights"][name]), name
    from transformers import AutoModelForCausalLM

    initial = dict(AutoModelForCausalLM.from_pretrained(tiny_model_dir).named_parameters())
    assert any(not torch.equal(initial[n], t) for n, t in results[0]["weights"].items() if n in initial)
