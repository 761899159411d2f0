"""``async_training.trainer_generates_while_waiting``: the trainer's rank serves requests while it waits for groups,
hands them on (abort and resume with their tokens) while it computes, and staleness stays within its budget."""

from __future__ import annotations

import pytest
from _async_runs import recipe_config

from verl.experimental.fully_async_policy.staleness import StalenessBudget
from verl.experimental.fully_async_policy.trainer_replica import TRAINER_REPLICA_KEY, check_trainer_replica_config
from verl.trainer.config.async_config import AsyncTrainingConfig

KEY = "fully_async/trainer_replica"


def test_refused_without_partial_rollout():
    config = AsyncTrainingConfig(partial_rollout=False, trainer_generates_while_waiting=True)
    with pytest.raises(ValueError, match=TRAINER_REPLICA_KEY.replace(".", r"\.")):
        check_trainer_replica_config(config)
    assert not check_trainer_replica_config(AsyncTrainingConfig(partial_rollout=False))
    both = AsyncTrainingConfig(trainer_generates_while_waiting=True, keep_requests_through_sync=True)
    with pytest.raises(ValueError, match="keep_requests_through_sync"):
        check_trainer_replica_config(both)
    assert check_trainer_replica_config(AsyncTrainingConfig(trainer_generates_while_waiting=True))


@pytest.mark.ray
def test_trainer_replica_generates_and_staleness_stays_bounded(ray_cluster, tmp_path):
    from verl.experimental.separation.task_runner import run_async_training
    from verl.utils.tracking import read_metrics

    threshold, groups, updates = 1.0, 4, 3
    config = recipe_config(
        "fully_async",
        tmp_path,
        f"{TRAINER_REPLICA_KEY}=true",
        f"async_training.staleness_threshold={threshold}",
        "async_training.partial_rollout=true",
        "async_training.trigger_parameter_sync_step=1",
        f"data.train_batch_size={groups}",
        f"actor.ppo_mini_batch_size={groups}",
        "rollout.n=4",
        "data.max_response_length=32",
        "rollout.ignore_eos=true",
        "rollout.max_num_seqs=4",
        f"rollout.total_rollout_steps={groups * updates}",
    )
    summary = run_async_training(config, "fully_async")
    stats = summary["rollout"]
    metrics = read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == list(range(1, updates + 1))
    consumed = summary["consumed_indices"]
    assert len(consumed) == len(set(consumed)) == groups * updates
    # the trainer's rank generated: some requests finished there, counted per step in the metrics
    assert sum(m[f"{KEY}/requests"] for m in metrics) > 0
    assert sum(m[f"{KEY}/tokens"] for m in metrics) > 0
    assert all(m[f"{KEY}/open_s"] >= 0 for m in metrics)
    assert stats["trainer_replica_requests"] >= sum(m[f"{KEY}/requests"] for m in metrics)
    # every request the trainer's rank handed on resumed elsewhere
    assert stats["requests_resumed"] == stats["requests_aborted"]
    # staleness: no group older than the budget allows, and stale groups per sync within floor(s * R * T)
    # every group's start version is one the trainer had published (staleness in [0, max]: the histogram covers the
    # step's groups), and stale groups per sync stay within floor(s * R * T)
    budget = StalenessBudget(groups, 1, threshold)
    for m in metrics:
        top = int(m["fully_async/staleness/max"])
        assert sum(m[f"fully_async/staleness/{k}"] for k in range(top + 1)) == groups
        assert m["fully_async/stale_groups"] <= budget.max_stale_groups
    assert max(summary["stale_groups_per_sync"]) <= budget.max_stale_groups
    assert set(summary["replica_versions"]) == {summary["weight_version"]}
