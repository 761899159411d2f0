"""RestartPolicy: which failures a run may restart from (trainer.max_restarts) and where the restart resumes."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from verl.single_controller.ray.errors import WorkerDiedError, WorkerError
from verl.trainer.ppo.checkpointing import STATE_FILE, TRACKER_FILE
from verl.trainer.ppo.restarts import RestartPolicy, is_lost_process


def _died(rank=1):
    return WorkerDiedError("actor rank 1 died during update_actor()", role="actor", rank=rank, method="update_actor")


def _config(run_dir, max_restarts=2, resume_mode="disable"):
    return OmegaConf.create(
        {
            "trainer": {
                "default_local_dir": str(run_dir),
                "resume_mode": resume_mode,
                "resume_from_path": None,
                "max_restarts": max_restarts,
            }
        }
    )


def _save(run_dir, step):
    folder = run_dir / f"global_step_{step}"
    folder.mkdir(parents=True)
    torch.save({"global_step": step}, folder / STATE_FILE)
    (run_dir / TRACKER_FILE).write_text(str(step))
    return folder


def test_only_a_lost_process_is_worth_a_restart():
    assert is_lost_process(_died())
    try:
        try:
            raise _died()
        except WorkerDiedError as inner:
            raise RuntimeError("generation failed") from inner
    except RuntimeError as outer:
        assert is_lost_process(outer)
    assert not is_lost_process(WorkerError("rank 0 raised ValueError", role="actor", rank=0, method="m"))
    assert not is_lost_process(_died(rank=None))  # a group shut down on purpose
    assert not is_lost_process(ValueError("bad row 7"))
    # a weight sync whose replica died with its node (found by the chaos soak) is a lost process; a replica that
    # loaded other bytes is not
    from verl.checkpoint_engine.manager import WeightSyncError

    lost = WeightSyncError("version 31", {"replica0": "failed: ActorUnavailableError: The actor 4970 is unavailable"})
    assert is_lost_process(lost) and lost.lost_replicas == ["replica0"]
    assert not is_lost_process(WeightSyncError("version 31", {"replica0": "checksum ab differs from the trainer's"}))


def test_a_restart_resumes_from_the_newest_checkpoint_of_this_run(tmp_path):
    _save(tmp_path, 3)  # an older run's checkpoint, there before this run started
    policy = RestartPolicy(_config(tmp_path))
    assert policy.next_attempt(_died()) is policy.config  # nothing saved yet: start over as the run did
    newest = _save(tmp_path, 10)
    attempt = policy.next_attempt(_died())
    assert (attempt.trainer.resume_mode, attempt.trainer.resume_from_path) == ("resume_path", str(newest))
    assert policy.config.trainer.resume_mode == "disable"  # the run's own config is untouched
    assert policy.restarts == 2 and len(policy.causes) == 2


def test_the_budget_and_other_errors_reraise(tmp_path):
    policy = RestartPolicy(_config(tmp_path, max_restarts=1))
    policy.next_attempt(_died())
    with pytest.raises(WorkerDiedError):
        policy.next_attempt(_died())
    with pytest.raises(ValueError, match="bad row"):
        RestartPolicy(_config(tmp_path)).next_attempt(ValueError("bad row 7"))
    with pytest.raises(WorkerDiedError):
        RestartPolicy(_config(tmp_path, max_restarts=0)).next_attempt(_died())


def test_the_one_step_off_recipe_refuses_max_restarts_naming_the_key(tmp_path):
    from verl.experimental.separation.task_runner import run_async_training

    config = OmegaConf.create({"trainer": {"max_restarts": 2, "default_local_dir": str(tmp_path)}})
    with pytest.raises(ValueError, match=r"trainer.max_restarts=2: the one_step_off recipe does not restart itself"):
        run_async_training(config, "one_step_off")


def test_run_retries_a_lost_process_after_clearing_the_failed_attempt(tmp_path):
    policy = RestartPolicy(_config(tmp_path, max_restarts=1))
    newest = None
    seen, cleared = [], []

    def attempt(config):
        nonlocal newest
        seen.append(config.trainer.resume_mode)
        if len(seen) == 1:
            newest = _save(tmp_path, 4)
            raise _died()
        return "done"

    assert policy.run(attempt, after_failure=lambda: cleared.append(True)) == "done"
    assert seen == ["disable", "resume_path"] and cleared == [True] and policy.restarts == 1
    assert newest is not None
    with pytest.raises(ValueError, match="bad row"):  # not a lost process: no second attempt
        RestartPolicy(_config(tmp_path)).run(lambda config: (_ for _ in ()).throw(ValueError("bad row 7")))
