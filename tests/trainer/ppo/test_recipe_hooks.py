"""What ``RayPPOTrainer`` and the task runner hand a recipe's own ``fit()`` / ``run()``, checked without Ray:
``_get_gen_batch``'s pop semantics, scored generation outputs, the colocated ``checkpoint_manager``, the recipe
helpers (dumps, validation metrics, profiling) and the reward model's own pool."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.colocated_sync import ColocatedCheckpointManager
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.scored_generation import DriverRewardLoop, ScoredRolloutManager


def _prompts(rows: int = 2) -> DataProto:
    ids = torch.arange(rows * 3).view(rows, 3)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": ids.clone()},
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": str(i)}] for i in range(rows)], dtype=object),
            "data_source": np.array(["digits"] * rows, dtype=object),
            "reward_model": np.array([{"ground_truth": str(i)} for i in range(rows)], dtype=object),
            "index": np.arange(rows),
        },
        meta_info={"temperature": 0.7},
    )


def test_get_gen_batch_pops_prompt_columns_and_shares_reward_columns_before_uid_exists():
    batch = _prompts()
    gen_batch = object.__new__(RayPPOTrainer)._get_gen_batch(batch)
    assert set(gen_batch.batch.keys()) == {"input_ids", "attention_mask", "position_ids"}
    assert len(batch.batch.keys()) == 0 and len(batch) == 2  # the prompt tensors left the step's batch
    assert set(batch.non_tensor_batch) == {"data_source", "reward_model"}  # generation-only columns left too
    assert set(gen_batch.non_tensor_batch) == {"raw_prompt", "index", "data_source", "reward_model"}
    assert gen_batch.meta_info == {"temperature": 0.7}
    # what verl's fit() does next joins without conflicts
    output = gen_batch.repeat(2, interleave=True)
    output.batch["responses"] = torch.zeros(4, 2, dtype=torch.long)
    joined = batch.repeat(2, interleave=True).union(output)
    assert joined.non_tensor_batch["data_source"].tolist() == ["digits"] * 4


def _generation(rows: int = 2, rm_scores: bool = False) -> DataProto:
    tensors = {"responses": torch.ones(rows, 3, dtype=torch.long), "attention_mask": torch.ones(rows, 5)}
    if rm_scores:
        tensors["rm_scores"] = torch.full((rows, 3), 9.0)
    return DataProto.from_dict(tensors=tensors, non_tensors={"data_source": np.array(["d"] * rows, dtype=object)})


class _Manager:
    """Stands in for the agent-loop manager (the wrapper is what is tested)."""

    def __init__(self, output: DataProto) -> None:
        self.output, self.calls, self.server_count = output, 0, 3

    def generate_sequences(self, batch: DataProto) -> DataProto:
        self.calls += 1
        return self.output


def _reward_fn(data: DataProto, return_dict: bool = False):
    scores = torch.zeros(data.batch["responses"].shape)
    scores[:, -1] = 0.5
    return {"reward_tensor": scores, "reward_extra_info": {"acc": [1.0] * len(data)}}


def test_unscored_generations_are_scored_with_the_extra_columns_verl_reads():
    woken = []
    manager = ScoredRolloutManager(_Manager(_generation()), DriverRewardLoop(_reward_fn), lambda: woken.append(1))
    output = manager.generate_sequences(_generation())
    assert output.batch["rm_scores"][:, -1].tolist() == [0.5, 0.5]
    assert output.non_tensor_batch["acc"].tolist() == [1.0, 1.0]
    assert output.meta_info["reward_extra_keys"] == ["acc"] and output.meta_info["timing"] == {}
    assert woken == [1] and manager.server_count == 3  # engines woken first; other attributes are the manager's
    from verl.trainer.ppo.reward import extract_reward

    scores, extra = extract_reward(output)
    assert torch.equal(scores, output.batch["rm_scores"]) and extra["acc"].tolist() == [1.0, 1.0]


def test_generations_scored_in_the_loop_or_by_a_reward_model_are_left_as_they_are():
    scored = ScoredRolloutManager(_Manager(_generation(rm_scores=True)), DriverRewardLoop(_reward_fn))
    assert scored.generate_sequences(_generation()).batch["rm_scores"].max() == 9.0
    with_reward_model = ScoredRolloutManager(_Manager(_generation()), None)
    assert "rm_scores" not in with_reward_model.generate_sequences(_generation()).batch.keys()


class _ActorGroup:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def sleep_rollout(self) -> None:
        self.calls.append("sleep")

    def wake_up_rollout(self) -> None:
        self.calls.append("wake")


class _Trainer:
    def __init__(self) -> None:
        self.actor_rollout_wg, self.weight_version = _ActorGroup(), 4

    def _push_weights(self, metrics: dict) -> None:
        self.weight_version += 1
        self.actor_rollout_wg.calls.append(f"push {self.weight_version}")


def test_checkpoint_manager_sleeps_once_and_wakes_before_pushing_the_next_version():
    trainer = _Trainer()
    manager = ColocatedCheckpointManager(trainer)
    manager.sleep_replicas()
    manager.sleep_replicas()
    assert manager.update_weights(global_steps=7) == {"version": 5, "global_steps": 7}
    manager.ensure_awake()  # awake already: nothing to do
    assert trainer.actor_rollout_wg.calls == ["sleep", "wake", "push 5"]
    with pytest.raises(NotImplementedError, match="abort_replicas"):
        manager.abort_replicas()


def test_generations_are_written_one_json_line_per_sample(tmp_path):
    path = RayPPOTrainer._write_generations(
        ["a=", "b="], ["aa", "bx"], ["aa", "bb"], [1.0, 0.5], {"acc": [1, 0], "short": [1]}, str(tmp_path), 3
    )
    rows = [json.loads(line) for line in open(path)]
    assert rows[1] == {"input": "b=", "output": "bx", "gts": "bb", "score": 0.5, "acc": 0, "step": 3}


def _bare_trainer(profiled_steps=None, continuous=False):
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.config.ppo_config import build_ppo_config

    overrides = [f"global_profiler.profile_continuous_steps={str(continuous).lower()}"]
    if profiled_steps:
        overrides.append(f"global_profiler.steps={list(profiled_steps)}")
    trainer = object.__new__(RayPPOTrainer)
    trainer.ppo_config = build_ppo_config(compose_ppo_config(overrides))
    trainer.global_steps = 0
    return trainer


def test_validation_metrics_split_core_and_aux_as_verl_and_merge_partial_results():
    trainer = _bare_trainer()
    sources = np.array(["s"] * 4, dtype=object)
    part = {
        "data_sources": [sources[:2]],
        "sample_uids": ["u1", "u1"],
        "sample_turns": [],
        "reward_extra_infos_dict": {"reward": [1.0, 0.0], "acc": [1.0, 0.0]},
    }
    other = {**part, "sample_uids": ["u2", "u2"], "reward_extra_infos_dict": {"reward": [1.0, 1.0], "acc": [1, 1]}}
    merged = trainer._merge_validation_results(part, other)
    whole = trainer._val_metrics_update(
        sources, ["u1", "u1", "u2", "u2"], {"reward": [1.0, 0.0, 1.0, 1.0], "acc": [1.0, 0.0, 1, 1]}, []
    )
    assert merged == whole
    assert merged["val-core/s/acc/mean@2"] == pytest.approx(0.75)  # acc is the core variable when reported
    assert "val-aux/s/reward/mean@2" in merged and not any(k.startswith("val-core/s/reward") for k in merged)
    assert trainer._merge_validation_results(None, None) == {}


class _ProfiledGroup:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start_profile(self, **kwargs):
        self.calls.append(("start", kwargs))

    def stop_profile(self, run_command=True):
        self.calls.append(("stop", run_command))


def test_profile_hooks_follow_global_profiler_steps_and_name_a_group_without_profiler():
    trainer = _bare_trainer(profiled_steps=[2, 3], continuous=True)
    trainer.actor_rollout_wg = group = _ProfiledGroup()
    trainer._reset_profile_steps()
    for step in (1, 2, 3, 4):
        trainer.global_steps = step
        trainer._fit_start_profile()
        trainer._fit_stop_profile()
    # one continuous window over steps 2-3; the finish command runs on the last profiled step
    assert group.calls == [("start", {"profile_step": 2}), ("stop", True)]
    trainer._start_profiling(False)
    trainer.actor_rollout_wg = _ActorGroup()
    with pytest.raises(NotImplementedError, match="start_profile: worker group .* has no profiler"):
        trainer._start_profiling(True)


def test_reward_model_pool_of_its_own_is_placed_and_sized_from_its_keys():
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import Role

    def runner_for(*overrides):
        config, _ = resolve_config(compose_ppo_config(["reward.reward_model.enable=true", *overrides]))
        runner = BaseTaskRunner()
        runner.add_reward_model_resource_pool(config)
        return runner, config

    runner, config = runner_for("reward.reward_model.model.path=/rm")
    assert runner.mapping[Role.RewardModel] == "global_pool"
    runner, config = runner_for(
        "reward.reward_model.model.path=/rm",
        "reward.reward_model.enable_resource_pool=true",
        "reward.reward_model.nnodes=1",
        "reward.reward_model.n_gpus_per_node=2",
    )
    assert runner.mapping[Role.RewardModel] == "reward_pool"
    assert runner.init_resource_pool_mgr(config).resource_pool_spec["reward_pool"] == [2]
    runner, config = runner_for("reward.reward_model.model.path=/rm", "reward.reward_model.enable_resource_pool=true")
    with pytest.raises(ValueError, match=r"reward.reward_model.nnodes=0: must be > 0"):
        runner.init_resource_pool_mgr(config)
