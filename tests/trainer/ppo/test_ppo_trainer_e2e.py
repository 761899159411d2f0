"""The PPO trainer end to end on the shared Ray cluster: learning, kill-and-resume equivalence, generation dumps."""

import json
import os
import time

import pytest
import ray

from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.demo import demo_overrides
from verl.trainer.main_ppo import resolve_config
from verl.trainer.ppo.checkpointing import TRACKER_FILE
from verl.trainer.ppo.task_runner import TaskRunner, run_ppo
from verl.utils.tracking import read_metrics

pytestmark = pytest.mark.ray

# Learning test margins (issue acceptance: last-20 mean >= 5x first-10 mean and > 0.5), measured over seeds 1, 2
# and 3 (docs/learning_results.md). At 160 steps seeds 1 and 3 ended at 0.84 (last-20) but one seed-2 run at
# 0.58, too close to 0.5; at 200 steps seed 1 ended at 0.99 (118x) and seed 2 at 0.97 (85x).
LEARNING_STEPS = 200


def _config(tmp_path, *extra):
    skip = (
        "trainer.total_training_steps",
        "trainer.default_local_dir",
        "trainer.logger",
        "trainer.test_freq",
        "trainer.val_before_train",
    )
    overrides = [o for o in demo_overrides() if not o.startswith(skip)]
    overrides += [
        f"trainer.default_local_dir={tmp_path}",
        "trainer.logger=[file]",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        *extra,
    ]
    config, _ = resolve_config(compose_ppo_config(overrides))
    return config


@pytest.mark.slow  # 200 steps; reward rise in the default tier: tests/multinode (30 steps) and test_upstream_recipe
def test_grpo_learns_target_digit_with_two_workers(ray_cluster, tmp_path):
    seed = int(os.environ.get("VERL_TEST_SEED", "1"))
    config = _config(tmp_path, f"trainer.total_training_steps={LEARNING_STEPS}", f"trainer.seed={seed}")
    run_ppo(config)
    scores = [r["critic/score/mean"] for r in read_metrics(tmp_path)]
    assert len(scores) == LEARNING_STEPS
    first, last = sum(scores[:10]) / 10, sum(scores[-20:]) / 20
    assert last > 0.5, f"mean reward of the last 20 steps {last:.3f} (first 10: {first:.3f})"
    assert last >= 5 * first, f"last-20 mean {last:.3f} is not 5x the first-10 mean {first:.3f}"


_COMPARED = (
    "critic/score/mean",
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "response_length/mean",
    "critic/advantages/max",
)


def _wait_for_checkpoint(run_dir, step, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    tracker = run_dir / TRACKER_FILE
    while time.monotonic() < deadline:
        if tracker.is_file() and tracker.read_text().strip() == str(step):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no checkpoint of step {step} in {run_dir} after {timeout_s}s")


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_metrics(ray_cluster, tmp_path):
    # One worker process keeps the three start-ups short; two ranks are covered by the learning test.
    steps = (
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
        "trainer.resume_mode=auto",
        "trainer.n_gpus_per_node=1",
    )
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    run_ppo(_config(full_dir, *steps))

    killed_config = _config(killed_dir, *steps)
    runner = ray.remote(num_cpus=0.1)(TaskRunner).remote()
    pending = runner.run.remote(killed_config)
    _wait_for_checkpoint(killed_dir, 2)
    ray.kill(runner, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(pending, timeout=60)

    run_ppo(killed_config)
    full = {r["step"]: r for r in read_metrics(full_dir)}
    resumed = {r["step"]: r for r in read_metrics(killed_dir)}
    assert sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in _COMPARED:
            assert resumed[step][key] == pytest.approx(full[step][key], rel=1e-6, abs=1e-7), (step, key)


@pytest.mark.slow
def test_resume_deletes_the_loaded_checkpoint_when_asked(ray_cluster, tmp_path):
    one_worker = "trainer.n_gpus_per_node=1"
    run_ppo(_config(tmp_path, "trainer.total_training_steps=2", "trainer.save_freq=1", one_worker))
    assert (tmp_path / TRACKER_FILE).read_text() == "2" and (tmp_path / "global_step_2" / "actor").is_dir()
    run_ppo(
        _config(
            tmp_path,
            "trainer.total_training_steps=3",
            "trainer.save_freq=-1",
            "trainer.resume_mode=auto",
            "trainer.del_local_ckpt_after_load=true",
            one_worker,
        )
    )
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]  # the second run resumed after step 2
    assert not (tmp_path / "global_step_2").exists()
    assert (tmp_path / "global_step_1" / "actor").is_dir()  # not loaded: kept, and the tracker now names it
    assert (tmp_path / TRACKER_FILE).read_text() == "1"


@pytest.mark.slow
def test_async_checkpoints_are_completed_and_resumable(ray_cluster, tmp_path):
    one_worker = "trainer.n_gpus_per_node=1"
    async_save = "actor.checkpoint.async_save=true"
    run_ppo(_config(tmp_path, "trainer.total_training_steps=2", "trainer.save_freq=1", one_worker, async_save))
    assert (tmp_path / TRACKER_FILE).read_text() == "2"  # the last save was completed when training ended
    for step in (1, 2):
        folder = tmp_path / f"global_step_{step}"
        assert (folder / "trainer_state.pt").is_file() and (folder / "actor" / "checkpoint_meta.json").is_file()
    run_ppo(
        _config(
            tmp_path,
            "trainer.total_training_steps=3",
            "trainer.save_freq=-1",
            "trainer.resume_mode=auto",
            one_worker,
            async_save,
        )
    )
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]  # resumed after step 2


@pytest.mark.slow
def test_generations_are_dumped_and_logged_with_their_scores(ray_cluster, tmp_path):
    rollouts, validations = tmp_path / "rollouts", tmp_path / "validations"
    config = _config(
        tmp_path / "run",
        "trainer.total_training_steps=2",
        f"trainer.rollout_data_dir={rollouts}",
        f"trainer.validation_data_dir={validations}",
        "trainer.val_before_train=true",
        "trainer.test_freq=2",
        "trainer.log_val_generations=3",
    )
    run_ppo(config)
    assert sorted(p.name for p in rollouts.iterdir()) == ["1.jsonl", "2.jsonl"]
    assert sorted(p.name for p in validations.iterdir()) == ["0.jsonl", "2.jsonl"]
    metrics = {r["training/global_step"]: r for r in read_metrics(tmp_path / "run") if "critic/score/mean" in r}
    samples = int(config.data.train_batch_size) * int(config.rollout.n)
    for step in (1, 2):
        records = [json.loads(line) for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
        assert len(records) == samples
        assert {r["step"] for r in records} == {step}
        assert all(r["input"] and isinstance(r["output"], str) and r["uid"] for r in records)
        mean = sum(r["score"] for r in records) / samples
        assert mean == pytest.approx(metrics[step]["critic/score/mean"], abs=1e-6)
    validation = [json.loads(line) for line in (validations / "0.jsonl").read_text().splitlines()]
    assert validation and all(r["step"] == 0 and "score" in r for r in validation)
    logged = [json.loads(line) for line in (tmp_path / "run" / "val_generations.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [0, 0, 0, 2, 2, 2]
    assert [r["input"] for r in logged[:3]] == [r["input"] for r in logged[3:]]  # the same prompts each time
    dumped = {(r["input"], r["output"], r["score"]) for r in validation}
    assert {(r["input"], r["output"], r["score"]) for r in logged[:3]} <= dumped


@pytest.mark.slow
def test_a_resume_that_fails_deletes_nothing(ray_cluster, tmp_path):
    import torch

    one_worker = "trainer.n_gpus_per_node=1"
    run_ppo(_config(tmp_path, "trainer.total_training_steps=1", "trainer.save_freq=1", one_worker))
    state_file = tmp_path / "global_step_1" / "trainer_state.pt"
    state = torch.load(state_file, weights_only=False)
    state["weight_version"] = "not a number"  # the restore fails after the worker shards have loaded
    torch.save(state, state_file)
    with pytest.raises(ValueError, match="not a number"):
        run_ppo(
            _config(
                tmp_path,
                "trainer.total_training_steps=2",
                "trainer.resume_mode=auto",
                "trainer.del_local_ckpt_after_load=true",
                one_worker,
            )
        )
    assert (tmp_path / "global_step_1" / "actor" / "checkpoint_meta.json").is_file()
    assert (tmp_path / TRACKER_FILE).read_text() == "1"


def _logged_steps(run_dir) -> list[int]:
    """Every step record in the run folder's metrics file, re-logged steps included, in the order written."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


@pytest.mark.slow
def test_a_corrupt_latest_checkpoint_gives_way_to_the_previous_one(ray_cluster, tmp_path):
    """A truncated shard in the newest checkpoint: ``resume_mode=auto`` resumes from the one before (and trains
    step 2 again) instead of failing or starting afresh."""
    one_worker = "trainer.n_gpus_per_node=1"
    run_ppo(_config(tmp_path, "trainer.total_training_steps=2", "trainer.save_freq=1", one_worker))
    shards = sorted((tmp_path / "global_step_2" / "actor").rglob("*.distcp"))
    assert shards, "expected torch.distributed.checkpoint shards in the actor folder"
    biggest = max(shards, key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 3])
    resumed = ("trainer.total_training_steps=3", "trainer.save_freq=1", "trainer.resume_mode=auto", one_worker)
    run_ppo(_config(tmp_path, *resumed))
    assert _logged_steps(tmp_path) == [1, 2, 2, 3]  # resumed after step 1, not step 2
    assert (tmp_path / TRACKER_FILE).read_text() == "3"  # step 2 saved again over the corrupt folder


@pytest.mark.slow
def test_a_corrupt_only_checkpoint_is_an_error_not_a_fresh_start(ray_cluster, tmp_path):
    one_worker = "trainer.n_gpus_per_node=1"
    run_ppo(_config(tmp_path, "trainer.total_training_steps=1", "trainer.save_freq=1", one_worker))
    (tmp_path / "global_step_1" / "trainer_state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(Exception, match="global_step_1|trainer_state"):
        run_ppo(_config(tmp_path, "trainer.total_training_steps=2", "trainer.resume_mode=auto", one_worker))
    assert _logged_steps(tmp_path) == [1]


def _mount_tmpfs(path, size_bytes: int) -> bool:
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.slow
def test_a_full_disk_names_the_folder_and_keeps_the_last_checkpoint(ray_cluster, tmp_path):
    """The checkpoint folder on a small tmpfs that holds one checkpoint: the second save fails with an error naming
    the fault, the folder and the intact checkpoint; the partial folder is removed and the run resumes from step 1."""
    import shutil
    import subprocess

    one_worker = "trainer.n_gpus_per_node=1"
    probe = tmp_path / "probe"
    run_ppo(_config(probe, "trainer.total_training_steps=1", "trainer.save_freq=1", one_worker))
    one_checkpoint = sum(f.stat().st_size for f in (probe / "global_step_1").rglob("*") if f.is_file())
    small = tmp_path / "small"
    if not _mount_tmpfs(small, int(one_checkpoint * 1.5)):  # room for one checkpoint and the metrics, not two
        pytest.skip("mounting a tmpfs needs root; the full-disk case was tried by hand (docs/reliability.md)")
    try:
        with pytest.raises(Exception, match="No space left on device") as failure:
            run_ppo(_config(small, "trainer.total_training_steps=2", "trainer.save_freq=1", one_worker))
        message = str(failure.value)
        assert "global_step_2" in message and "global_step_1" in message and "trainer.default_local_dir" in message
        assert not (small / "global_step_2").exists()
        assert (small / TRACKER_FILE).read_text() == "1" and (small / "global_step_1" / "trainer_state.pt").is_file()
        shutil.copytree(small, tmp_path / "moved")  # a rerun elsewhere resumes from the intact checkpoint
    finally:
        subprocess.run(["umount", str(small)], check=False)
    moved = tmp_path / "moved"
    run_ppo(_config(moved, "trainer.total_training_steps=2", "trainer.resume_mode=auto", one_worker))
    assert _logged_steps(moved) == [1, 2]
