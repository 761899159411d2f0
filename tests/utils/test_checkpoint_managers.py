"""verl's checkpoint-manager API (``verl.utils.checkpoint``): retention, the tracker file, the per-rank FSDP layout,
reading the workers' own layout, and LoRA-only checkpoints in the workers' manager. Single process, no Ray."""

import json
import os
import random

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model

from verl.utils.checkpoint import BaseCheckpointManager, find_latest_ckpt_path, should_save_ckpt_esi
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.workers.config.actor import CheckpointConfig
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager as WorkerCheckpointManager


def _trained(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def test_retention_keeps_the_newest_folders(tmp_path):
    manager = BaseCheckpointManager(model=None, checkpoint_config={"save_contents": ["model"]})
    assert (manager.should_save_model, manager.should_save_optimizer, manager.should_load_extra) == (True, False, True)
    folders = []
    for step in range(4):
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        manager.ensure_checkpoint_capacity(2)
        manager.register_checkpoint(str(folder), 2)
        folders.append(folder)
    assert [f.exists() for f in folders] == [False, False, True, True]
    manager.ensure_checkpoint_capacity(2)  # before the next save: room for one more
    assert [f.exists() for f in folders] == [False, False, False, True]


def test_tracker_file_names_the_latest_checkpoint(tmp_path, monkeypatch):
    assert find_latest_ckpt_path(str(tmp_path)) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    assert find_latest_ckpt_path(str(tmp_path)) is None  # the folder is gone
    (tmp_path / "global_step_7").mkdir()
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_7")
    monkeypatch.delenv("SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", raising=False)
    monkeypatch.setenv("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", str(__import__("time").time() + 100))
    assert should_save_ckpt_esi(max_steps_duration=60, save_ckpt_duration=60)
    assert not should_save_ckpt_esi(max_steps_duration=10, save_ckpt_duration=10)


def test_per_rank_layout_round_trips_training_state(tmp_path):
    model, optimizer, scheduler = _trained()
    manager = FSDPCheckpointManager(model, optimizer, scheduler)
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    manager.save_checkpoint(str(tmp_path), global_step=5)
    expected_draws = (random.random(), np.random.rand(), torch.rand(1).item())
    names = sorted(os.listdir(tmp_path))
    assert {
        "model_world_size_1_rank_0.pt",
        "optim_world_size_1_rank_0.pt",
        "extra_state_world_size_1_rank_0.pt",
        "fsdp_config.json",
        "huggingface",
    } <= set(names)
    assert json.loads((tmp_path / "fsdp_config.json").read_text()) == {"FSDP_version": 0, "world_size": 1}

    fresh, fresh_optimizer, fresh_scheduler = _trained(seed=1)
    FSDPCheckpointManager(fresh, fresh_optimizer, fresh_scheduler).load_checkpoint(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    assert fresh_scheduler.state_dict() == scheduler.state_dict()
    assert fresh_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected_draws


def test_loading_files_of_another_world_size_names_what_is_there(tmp_path):
    model, optimizer, _ = _trained()
    FSDPCheckpointManager(model, optimizer, checkpoint_config={"save_contents": ["model"]}).save_checkpoint(
        str(tmp_path)
    )
    os.rename(tmp_path / "model_world_size_1_rank_0.pt", tmp_path / "model_world_size_4_rank_0.pt")
    with pytest.raises(FileNotFoundError, match=r"it holds model files of world size \[4\]"):
        FSDPCheckpointManager(model, checkpoint_config={"load_contents": ["model"]}).load_checkpoint(str(tmp_path))


def test_the_workers_layout_loads_through_the_verl_api(tmp_path):
    model, optimizer, scheduler = _trained()
    WorkerCheckpointManager(model, optimizer, scheduler).save_checkpoint(str(tmp_path), global_step=2)
    fresh, fresh_optimizer, fresh_scheduler = _trained(seed=1)
    result = FSDPCheckpointManager(fresh, fresh_optimizer, fresh_scheduler).load_checkpoint(str(tmp_path))
    assert result["global_step"] == 2
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))


def _lora_model(seed):
    torch.manual_seed(seed)
    base = torch.nn.Sequential()
    base.add_module("proj", torch.nn.Linear(4, 4))
    return get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["proj"], init_lora_weights=False))


def test_workers_manager_saves_only_adapters_with_save_lora_only(tmp_path):
    model = _lora_model(0)
    config = CheckpointConfig(save_contents=["model"], save_lora_only=True)
    WorkerCheckpointManager(model, checkpoint_config=config).save_checkpoint(str(tmp_path))
    meta = json.loads((tmp_path / "checkpoint_meta.json").read_text())
    assert meta["lora_only"] is True

    other = _lora_model(1)  # different base and adapters
    base_before = other.base_model.model.proj.base_layer.weight.detach().clone()
    WorkerCheckpointManager(other, checkpoint_config=config).load_checkpoint(str(tmp_path))
    assert torch.equal(other.base_model.model.proj.base_layer.weight, base_before)  # base kept
    for key, value in model.state_dict().items():
        if "lora_" in key:
            assert torch.equal(other.state_dict()[key], value), key
