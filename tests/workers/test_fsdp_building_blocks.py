"""Building blocks of the FSDP workers, without Ray or a process group: model-path checks, optimizer and LR
schedules, per-rank batch sizes, LoRA weight merging, weight buckets, per-rank config copies and the hybrid
rollout's batch layout."""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.checkpoint_engine import iter_named_weights
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.config import FSDPActorConfig, HFModelConfig, OptimizerConfig, RolloutConfig
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager
from verl.workers.fsdp.distributed import resolve_device
from verl.workers.fsdp.hybrid_rollout import HybridRollout
from verl.workers.fsdp.model_loader import apply_lora, parse_dtype, resolve_model_path
from verl.workers.fsdp.optimizer import build_lr_scheduler, build_optimizer
from verl.workers.fsdp.weights import adapter_state, has_lora
from verl.workers.fsdp.worker_config import optim_with_total_steps, per_rank_update_sizes, read_group, with_rank_sizes

# ---------------------------------------------------------------------------------------------------- model path


def test_missing_model_path_names_key_and_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=r"model\.path=.*nowhere.*no such folder"):
        resolve_model_path(HFModelConfig(path=str(missing)))


def test_model_path_that_is_a_file_or_lacks_config_or_weights(tmp_path):
    a_file = tmp_path / "weights.bin"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="weights.bin"):
        resolve_model_path(HFModelConfig(path=str(a_file)))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty.*no config\.json"):
        resolve_model_path(HFModelConfig(path=str(empty)))
    (empty / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(FileNotFoundError, match=r"critic\.model\.path=.*empty.*no weights"):
        resolve_model_path(HFModelConfig(path=str(empty)), key="critic.model.path")


def test_valid_model_path_is_returned(tiny_model_dir):
    assert resolve_model_path(HFModelConfig(path=str(tiny_model_dir))) == str(tiny_model_dir)


def test_bad_dtype_and_device_names_are_errors():
    assert parse_dtype("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match=r"actor\.fsdp_config\.model_dtype='fp8'"):
        parse_dtype("fp8", key="actor.fsdp_config.model_dtype")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="trainer.device"):
        resolve_device("tpu")


# ---------------------------------------------------------------------------------------------------- optimizer


def _lrs(scheduler, optimizer, steps):
    values = []
    for _ in range(steps):
        values.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return values


def _optimizer(**kwargs):
    cfg = OptimizerConfig(lr=1.0, **kwargs)
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg)
    return cfg, opt


def test_constant_schedule_with_warmup_steps():
    cfg, opt = _optimizer(lr_warmup_steps=2)
    assert _lrs(build_lr_scheduler(opt, cfg), opt, 4) == [0.0, 0.5, 1.0, 1.0]
    cfg, opt = _optimizer()
    assert _lrs(build_lr_scheduler(opt, cfg), opt, 3) == [1.0, 1.0, 1.0]


def test_warmup_ratio_uses_total_steps_and_needs_them():
    cfg, opt = _optimizer(lr_warmup_steps_ratio=0.5, total_training_steps=4)
    assert _lrs(build_lr_scheduler(opt, cfg), opt, 3) == [0.0, 0.5, 1.0]
    cfg, opt = _optimizer(lr_warmup_steps_ratio=0.5)
    with pytest.raises(ValueError, match=r"actor\.optim\.total_training_steps"):
        build_lr_scheduler(opt, cfg)


def test_cosine_schedule_decays_to_min_lr_ratio():
    cfg, opt = _optimizer(lr_scheduler_type="cosine", lr_warmup_steps=1, total_training_steps=5, min_lr_ratio=0.1)
    lrs = _lrs(build_lr_scheduler(opt, cfg), opt, 6)
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(1.0)
    assert all(a > b for a, b in zip(lrs[1:5], lrs[2:5]))
    assert lrs[5] == pytest.approx(0.1)
    cfg, opt = _optimizer(lr_scheduler_type="cosine")
    with pytest.raises(ValueError, match=r"critic\.optim\.lr_scheduler_type=cosine needs critic\.optim"):
        build_lr_scheduler(opt, cfg, key="critic.optim")


def test_optimizer_takes_only_trainable_parameters():
    frozen, live = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))
    frozen.requires_grad_(False)
    opt = build_optimizer([frozen, live], OptimizerConfig(lr=0.1))
    assert [p.shape for p in opt.param_groups[0]["params"]] == [torch.Size([3])]
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer([frozen], OptimizerConfig(lr=0.1))
    with pytest.raises(ValueError, match=r"actor\.optim\.optimizer='SGD'"):
        build_optimizer([live], OptimizerConfig(optimizer="SGD", lr=0.1))


# ---------------------------------------------------------------------------------------------------- batch sizes


def test_per_rank_sizes_count_samples():
    cfg = FSDPActorConfig(ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=8)
    assert per_rank_update_sizes(cfg, "actor", rollout_n=2, dp_size=2) == {
        "ppo_mini_batch_size": 4,
        "ppo_micro_batch_size_per_gpu": 4,
        "ppo_micro_batch_size": None,
    }
    legacy = FSDPActorConfig(ppo_mini_batch_size=4, ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=None)
    assert per_rank_update_sizes(legacy, "actor", 2, 2)["ppo_micro_batch_size_per_gpu"] == 2


def test_uneven_mini_batch_split_names_the_key():
    cfg = FSDPActorConfig(ppo_mini_batch_size=3)
    with pytest.raises(ConfigError, match=r"^actor\.ppo_mini_batch_size: .*3.*rollout\.n.*over the 2 trainer"):
        per_rank_update_sizes(cfg, "actor", rollout_n=1, dp_size=2)


def test_schedule_takes_total_steps_from_trainer_when_optim_lacks_them():
    from verl.trainer.config.trainer_config import TrainerConfig

    optim = OptimizerConfig(lr=1.0, lr_scheduler_type="cosine")
    assert optim_with_total_steps(optim, TrainerConfig()) is optim
    view = optim_with_total_steps(optim, TrainerConfig(total_training_steps=4))
    assert view.total_training_steps == 4 and view.lr_scheduler_type == "cosine"
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], view)
    assert _lrs(build_lr_scheduler(opt, view), opt, 5)[-1] == pytest.approx(0.0)
    own = OptimizerConfig(lr=1.0, total_training_steps=9)
    assert optim_with_total_steps(own, TrainerConfig(total_training_steps=4)) is own


def test_per_rank_copy_replaces_sizes_and_leaves_the_config_alone():
    base = FSDPActorConfig(ppo_mini_batch_size=8, clip_ratio=0.3, _extra={"recipe_key": 1})
    copy = with_rank_sizes(base, "actor", rollout_n=2, dp_size=4, use_remove_padding=True)
    assert (copy.ppo_mini_batch_size, copy.use_remove_padding, copy.clip_ratio) == (4, True, 0.3)
    assert copy.recipe_key == 1 and type(copy) is FSDPActorConfig
    assert (base.ppo_mini_batch_size, base.use_remove_padding) == (8, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.clip_ratio = 1.0


def test_read_group_validates_with_dotted_keys():
    cfg = OmegaConf.create({"actor": {"ppo_epochs": 2}, "rollout": {"n": 0}})
    assert read_group(cfg, "actor", FSDPActorConfig).ppo_epochs == 2
    assert read_group(cfg, "ref", FSDPActorConfig) == FSDPActorConfig()
    with pytest.raises(ConfigError, match=r"rollout\.n"):
        read_group(cfg, "rollout", RolloutConfig)


# ---------------------------------------------------------------------------------------------------- weights


def test_lora_merge_matches_peft_merge_and_unload(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    plain_names = list(base.state_dict())
    model = apply_lora(
        base,
        HFModelConfig(
            path=str(tiny_model_dir),
            lora_rank=4,
            lora_alpha=8,
            target_modules="all-linear",
            exclude_modules=None,
            lora_adapter_path=None,
        ),
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
    assert has_lora(model) and not has_lora(model.get_base_model().model.embed_tokens)
    assert all(k.endswith(("lora_A.weight", "lora_B.weight")) for k in adapter_state(model))
    assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())
    # what the rollout and the HF export receive: merged, under the plain model's names
    merged = dict(iter_named_weights(model))
    expected = model.merge_and_unload().state_dict()
    assert sorted(merged) == sorted(plain_names) == sorted(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(merged[name], tensor, atol=1e-6, rtol=1e-6)


def test_plain_model_weights_keep_their_names(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    got = dict(iter_named_weights(model))
    assert got.keys() == model.state_dict().keys()
    assert all(torch.equal(got[k], v) for k, v in model.state_dict().items())


# ---------------------------------------------------------------------------------------------------- checkpoints


def test_loading_a_missing_or_foreign_checkpoint_names_it(tmp_path):
    manager = FSDPCheckpointManager(torch.nn.Linear(2, 2))
    with pytest.raises(FileNotFoundError, match="global_step_9"):
        manager.load_checkpoint(str(tmp_path / "global_step_9"))
    with pytest.raises(FileNotFoundError, match="not a actor checkpoint|no checkpoint_meta.json"):
        manager.load_checkpoint(str(tmp_path))


# ---------------------------------------------------------------------------------------------------- rollout


def test_sampling_params_follow_config_validation_and_meta_overrides():
    cfg = RolloutConfig(temperature=0.7, top_k=5, response_length=4, calculate_log_probs=True)
    fake = SimpleNamespace(config=cfg)
    params, n = HybridRollout.sampling_params(fake, {})
    assert (params["temperature"], params["top_k"], params["max_tokens"], params["logprobs"], n) == (0.7, 5, 4, True, 1)
    params, n = HybridRollout.sampling_params(fake, {"validate": True})
    assert (params["temperature"], params["do_sample"], n) == (0.0, False, 1)
    params, n = HybridRollout.sampling_params(fake, {"temperature": 0.0, "do_sample": False, "n": 3})
    assert (params["temperature"], params["do_sample"], n) == (0.0, False, 3)
    with pytest.raises(ValueError, match=r"meta_info\['n'\]"):
        HybridRollout.sampling_params(fake, {"n": 0})


def test_hybrid_rollout_repeats_rows_for_n_and_is_greedy_when_validating(tiny_model_dir):
    cfg = RolloutConfig(prompt_length=6, response_length=5, calculate_log_probs=True, max_num_seqs=8)
    rollout = HybridRollout(cfg, str(tiny_model_dir), torch.device("cpu"), pad_token_id=0)
    try:
        ids = torch.tensor([[0, 0, 7, 8, 9, 10], [3, 4, 5, 6, 7, 8]])
        mask = (ids != 0).long()
        prompts = DataProto.from_dict(
            {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)},
            non_tensors={"uid": ["a", "b"]},
        )
        out = rollout.generate_sequences(
            DataProto.from_dict(prompts.batch.to_dict(), non_tensors={"uid": ["a", "b"]}, meta_info={"n": 2})
        )
        assert len(out) == 4 and list(out.non_tensor_batch["uid"]) == ["a", "a", "b", "b"]
        assert torch.equal(out.batch["prompts"][1], ids[0]) and torch.equal(out.batch["prompts"][2], ids[1])
        rollout.sleep()  # a batch call on a sleeping engine wakes it for the batch and puts it back to sleep
        first = rollout.generate_sequences(DataProto.from_dict(prompts.batch.to_dict(), meta_info={"validate": True}))
        assert rollout.asleep
        rollout.wake_up()
        second = rollout.generate_sequences(DataProto.from_dict(prompts.batch.to_dict(), meta_info={"validate": True}))
        assert torch.equal(first.batch["responses"], second.batch["responses"])
        lp = first.batch["rollout_log_probs"][first.batch["response_mask"].bool()]
        assert torch.isfinite(lp).all() and (lp <= 0).all() and not math.isnan(float(lp.sum()))
        missing = DataProto.from_dict({"input_ids": ids})
        with pytest.raises(KeyError, match="attention_mask"):
            rollout.generate_sequences(missing)
    finally:
        rollout.close()


_ONE_RANK_WRAP = """
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from transformers import AutoModelForCausalLM
from verl.workers.fsdp.fsdp_wrap import apply_fsdp2
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
plain = apply_fsdp2(AutoModelForCausalLM.from_pretrained({path!r}), mesh)
cast = apply_fsdp2(AutoModelForCausalLM.from_pretrained({path!r}), mesh, param_dtype=torch.bfloat16)
print(isinstance(plain, FSDPModule), isinstance(cast, FSDPModule))
"""


def test_one_rank_without_casting_is_left_unwrapped(tiny_model_dir):
    """Nothing to shard on one rank: FSDP2 is skipped unless it also casts (mixed precision) or offloads."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _ONE_RANK_WRAP.format(path=str(tiny_model_dir))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["False", "True"]
