"""Dynamic sampling: the group filter on hand-made batches, and ``data.gen_batch_size`` /
``algorithm.filter_groups`` in a real run of the trainer."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.dynamic_sampling import GroupFilter, group_metric_values, keep_first_groups


def _scored(uids: list[str], scores: list[float], **columns) -> DataProto:
    """Rows with one response token each, scored ``scores``."""
    tensors = {"token_level_scores": torch.tensor(scores, dtype=torch.float32)[:, None]}
    non_tensors = {"uid": np.array(uids, dtype=object), **{k: np.array(v, dtype=object) for k, v in columns.items()}}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"global_token_num": [1] * 4})


def test_groups_without_reward_spread_are_dropped_and_single_responses_kept():
    group_filter = GroupFilter("seq_reward", train_batch_size=3, max_num_gen_batches=0)
    group_filter.add(_scored(["a", "a", "b", "b", "c"], [1.0, 0.0, 1.0, 1.0, 0.0]))
    assert group_filter.kept_groups == 2 and not group_filter.full  # a (spread) and c (alone); b agrees
    group_filter.add(_scored(["d", "d"], [0.0, 0.5]))
    assert group_filter.full
    batch, metrics = group_filter.take()
    assert batch.non_tensor_batch["uid"].tolist() == ["a", "a", "c", "d", "d"]
    assert metrics == {"train/num_gen_batches": 2.0, "train/kept_group_ratio": 3 / 4}
    assert group_filter.num_gen_batches == 0 and not group_filter.parts  # reset for the next step


def test_the_step_batch_is_cut_at_group_boundaries_even_when_rows_are_interleaved():
    batch = _scored(["x", "y", "x", "z", "y", "z"], [0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    kept = keep_first_groups(batch, 2)
    assert kept.non_tensor_batch["uid"].tolist() == ["x", "y", "x", "y"]


def test_a_reward_extra_column_can_be_the_metric_and_a_missing_one_is_named():
    batch = _scored(["a", "a"], [0.0, 0.0], acc=[1.0, 0.0])
    assert group_metric_values(batch, "acc").tolist() == [1.0, 0.0]
    with pytest.raises(KeyError, match=r"algorithm.filter_groups.metric='pred'.*columns: \['acc', 'uid'\]"):
        group_metric_values(batch, "pred")


def test_too_many_generation_batches_fail_naming_the_limit():
    group_filter = GroupFilter("seq_reward", train_batch_size=2, max_num_gen_batches=2)
    for _ in range(2):
        group_filter.add(_scored(["a", "a"], [1.0, 1.0]))
    with pytest.raises(RuntimeError, match=r"max_num_gen_batches=2.*2 groups had no reward spread"):
        group_filter.check_budget()


# ---------------------------------------------------------------------------------------------- a real run


def _dumped_steps(run_dir) -> dict[int, list[dict]]:
    return {
        int(path.stem): [json.loads(line) for line in path.read_text().splitlines()]
        for path in (run_dir / "rollouts").glob("*.jsonl")
    }


def _run(tmp_path, *overrides):
    """Two steps of the demo on one worker process, dumping each step's samples."""
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.demo import demo_overrides
    from verl.trainer.main_ppo import resolve_config
    from verl.trainer.ppo.task_runner import run_ppo
    from verl.utils.tracking import read_metrics

    config, _ = resolve_config(
        compose_ppo_config(
            [
                *demo_overrides(),
                f"trainer.default_local_dir={tmp_path}",
                "trainer.logger=[file]",
                "trainer.test_freq=-1",
                "trainer.val_before_train=false",
                "trainer.total_training_steps=2",
                "trainer.n_gpus_per_node=1",
                "rollout.agent.num_workers=1",  # each agent-loop worker process costs seconds of CPU to start
                f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
                *overrides,
            ]
        )
    )
    run_ppo(config)
    return read_metrics(tmp_path), _dumped_steps(tmp_path)


@pytest.mark.ray
def test_gen_batch_size_sets_the_prompts_of_each_generation_batch(ray_cluster, tmp_path):
    # without filtering a step trains on its whole generation batch, as verl's trainer does; scored in the agent
    # loop (verl's spelling of the switch), validation included: the generation batch carries the reward columns
    metrics, dumps = _run(
        tmp_path,
        "data.gen_batch_size=8",
        "reward_model.launch_reward_fn_async=true",
        "trainer.val_before_train=true",
        "data.val_max_samples=8",
    )
    assert sorted(dumps) == [1, 2]
    for rows in dumps.values():
        assert len(rows) == 8 * 8 and len({row["uid"] for row in rows}) == 8
    assert all("train/num_gen_batches" not in row for row in metrics)
    assert metrics[0]["step"] == 0 and "val-core/synthetic/target_digit/reward/mean@1" in metrics[0]
    assert all(row["agent_loop/compute_score/max"] > 0 for row in metrics[1:])  # scored in the loop


@pytest.mark.ray
def test_filter_groups_fills_the_step_with_groups_that_carry_signal(ray_cluster, tmp_path):
    # 8 groups per step from generation batches of 4 prompts: every step needs two generation batches or more
    metrics, dumps = _run(
        tmp_path,
        "data.train_batch_size=8",
        "actor.ppo_mini_batch_size=8",
        "data.gen_batch_size=4",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=seq_reward",
    )
    assert sorted(dumps) == [1, 2]
    for step, rows in dumps.items():
        groups = defaultdict(list)
        for row in rows:
            groups[row["uid"]].append(row["score"])
        assert len(groups) == 8, f"step {step} trained on {len(groups)} groups"
        assert Counter(len(scores) for scores in groups.values()) == {8: 8}
        assert all(len(set(scores)) > 1 for scores in groups.values()), f"step {step} kept a group without spread"
    assert all(row["train/num_gen_batches"] >= 2 for row in metrics)
    assert all(0 < row["train/kept_group_ratio"] <= 1 for row in metrics)
