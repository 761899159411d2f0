"""Fully-async kill-and-resume: consumed prompts are not replayed, none is lost, weights and counters continue."""

from __future__ import annotations

import pytest
from _async_runs import ON_POLICY, kill_after_checkpoint, recipe_config, sync_reference

from verl.experimental.fully_async_policy.fully_async_trainer import compress_indices, expand_indices
from verl.experimental.separation.task_runner import run_async_training
from verl.trainer.ppo.checkpointing import TrainerCheckpointer
from verl.utils.tracking import read_metrics

pytestmark = pytest.mark.ray

COMPARED = ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/score/mean", "response_length/mean")
GROUPS = 16  # groups per update of the demo config
STEPS, SAVE_AT = 4, 2


def test_consumed_indices_round_trip():
    for indices in ([], [0, 1, 2], [0, 1, 3, 7, 2, 9], [5, 6]):
        packed = compress_indices(indices)
        assert expand_indices(packed) == sorted(set(indices))
    assert compress_indices([0, 1, 2, 5]) == {"below": 3, "above": [5]}


@pytest.mark.slow
def test_killed_fully_async_run_resumes_on_policy(ray_cluster, tmp_path):
    """Staleness 0, sync every update, no partial rollout: the resumed run equals the synchronous trainer."""
    overrides = (
        *ON_POLICY,
        "async_training.use_rollout_log_probs=false",
        "rollout.calculate_log_probs=false",
        f"rollout.total_rollout_steps={STEPS * GROUPS}",
        f"trainer.save_freq={SAVE_AT}",
        "trainer.resume_mode=auto",
    )
    config = recipe_config("fully_async", tmp_path, *overrides)
    assert kill_after_checkpoint(config, "fully_async", SAVE_AT) == SAVE_AT
    state = TrainerCheckpointer.load_trainer_state(tmp_path / f"global_step_{SAVE_AT}")
    assert state["weight_version"] == SAVE_AT
    assert expand_indices(state["fully_async"]["consumed_indices"]) == list(range(SAVE_AT * GROUPS))

    summary = run_async_training(config, "fully_async")
    assert summary["global_steps"] == STEPS and summary["weight_version"] == STEPS
    # the replicas got the restored actor as version 2 before generating: the bytes saved at the checkpoint
    assert summary["weight_checksums"][SAVE_AT] == state["weight_checksum"]
    assert summary["replica_versions"] == [STEPS]
    # every prompt trained on exactly once over both runs; groups queued at the kill were regenerated
    assert summary["consumed_indices"] == list(range(STEPS * GROUPS))
    stats = summary["rollout"]
    assert stats["groups_skipped_consumed"] == SAVE_AT * GROUPS
    assert stats["groups_started"] == (STEPS - SAVE_AT) * GROUPS
    metrics = {m["step"]: m for m in read_metrics(tmp_path)}
    assert sorted(metrics) == list(range(1, STEPS + 1))
    sync = {m["step"]: m for m in sync_reference(STEPS)}
    for step in range(SAVE_AT + 1, STEPS + 1):
        assert metrics[step]["fully_async/param_version"] == step - 1
        for key in COMPARED:
            assert metrics[step][key] == pytest.approx(sync[step][key], rel=1e-6, abs=1e-6), (step, key)


def test_checkpoint_of_another_trainer_is_refused(ray_cluster, tmp_path):
    # what the synchronous trainer writes: no rollout position
    TrainerCheckpointer(recipe_config("fully_async", tmp_path).trainer).save_trainer_state(1, {"weight_version": 1})
    config = recipe_config(
        "fully_async", tmp_path, "trainer.resume_mode=auto", f"rollout.total_rollout_steps={STEPS * GROUPS}"
    )
    with pytest.raises(Exception, match="no fully-async state"):
        run_async_training(config, "fully_async")


def _stalls_mid_sync(marker: str, step: int) -> type:
    """The fully-async trainer, stalled inside the weight sync of ``step``: the rollouter is paused (its requests
    aborted) and the new weights are on the replicas, but it is not resumed. Defined here so Ray pickles it by
    value to the task-runner actor."""
    import time
    from pathlib import Path

    from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer

    class StallsMidSync(FullyAsyncTrainer):
        def _push_weights(self, metrics: dict) -> None:
            super()._push_weights(metrics)
            if self.global_steps == step:
                Path(marker).write_text(str(self.weight_version))
                time.sleep(3600)

    return StallsMidSync


@pytest.mark.slow  # a kill and a resumed run; CI budget
def test_a_run_killed_mid_sync_resumes_without_losing_or_repeating_a_prompt(ray_cluster, tmp_path):
    """Partial rollout with staleness: the kill lands between pause/abort and resume of step 3's sync, after the
    checkpoint of step 2. The resumed run trains on every prompt exactly once over both runs, and every replica
    ends on the final, checksum-verified version."""
    import time

    import ray
    from omegaconf import OmegaConf

    from verl.experimental.separation.task_runner import AsyncTaskRunner
    from verl.trainer.ppo.checkpointing import TRACKER_FILE

    steps, groups, stall_at = 4, 4, 3
    config = recipe_config(
        "fully_async",
        tmp_path,
        "async_training.staleness_threshold=0.5",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.partial_rollout=true",
        f"data.train_batch_size={groups}",
        f"actor.ppo_mini_batch_size={groups}",
        "data.max_response_length=32",
        "rollout.ignore_eos=true",
        f"rollout.total_rollout_steps={steps * groups}",
        "trainer.save_freq=1",
        "trainer.resume_mode=auto",
    )
    marker = tmp_path / "stalled_mid_sync"
    runner = (
        ray.remote(AsyncTaskRunner).options(num_cpus=0.1).remote("fully_async", _stalls_mid_sync(str(marker), stall_at))
    )
    pending = runner.run.remote(OmegaConf.to_container(config, resolve=True))
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert time.monotonic() < deadline, "the run never reached the weight sync of step 3"
        ready, _ = ray.wait([pending], timeout=0.2)
        if ready:
            ray.get(pending)  # the run ended (or failed) before the stall: show why
            pytest.fail("the run ended before the weight sync of step 3")
    ray.kill(runner, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(pending, timeout=120)
    assert (tmp_path / TRACKER_FILE).read_text().strip() == str(stall_at - 1)
    saved = TrainerCheckpointer.load_trainer_state(tmp_path / f"global_step_{stall_at - 1}")
    consumed_before = expand_indices(saved["fully_async"]["consumed_indices"])
    assert len(consumed_before) == (stall_at - 1) * groups

    summary = run_async_training(config, "fully_async")
    assert summary["global_steps"] == steps
    consumed = summary["consumed_indices"]
    assert len(consumed) == len(set(consumed)) == steps * groups, "a prompt was lost or trained on twice"
    assert sorted(consumed) == list(range(steps * groups))
    assert set(consumed_before) <= set(consumed)
    assert summary["rollout"]["groups_skipped_consumed"] == len(consumed_before)
    final = summary["weight_version"]
    assert set(summary["replica_versions"]) == {final}
    assert summary["weight_checksums"][final]  # every replica reported this checksum for the final version
    assert summary["weight_checksums"][saved["weight_version"]] == saved["weight_checksum"]
    assert [m["step"] for m in read_metrics(tmp_path)][-(steps - stall_at + 1) :] == list(range(stall_at, steps + 1))
