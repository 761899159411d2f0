"""One-step-off kill-and-resume: the resumed run continues exactly where the uninterrupted one would be."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fully_async_policy"))
from _async_runs import kill_after_checkpoint, recipe_config  # noqa: E402

from verl.experimental.one_step_off_policy.ray_trainer import PENDING_DIR  # noqa: E402
from verl.experimental.separation.task_runner import run_async_training  # noqa: E402
from verl.trainer.ppo.checkpointing import TrainerCheckpointer  # noqa: E402
from verl.utils.tracking import read_metrics  # noqa: E402

pytestmark = pytest.mark.ray

COMPARED = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "critic/score/mean",
    "response_length/mean",
    "one_step_off/generation_version",
)
STEPS, SAVE_AT = 4, 2


@pytest.mark.slow
def test_killed_one_step_off_run_resumes_like_an_uninterrupted_one(ray_cluster, tmp_path):
    overrides = (f"trainer.total_training_steps={STEPS}", f"trainer.save_freq={SAVE_AT}", "trainer.resume_mode=auto")
    full = run_async_training(recipe_config("one_step_off", tmp_path / "full", *overrides), "one_step_off")

    killed_dir = tmp_path / "killed"
    config = recipe_config("one_step_off", killed_dir, *overrides)
    assert kill_after_checkpoint(config, "one_step_off", SAVE_AT) == SAVE_AT
    state = TrainerCheckpointer.load_trainer_state(killed_dir / f"global_step_{SAVE_AT}")
    # the actor saved after update 2 is version 2; batch 3 was generated under version 1 and saved with it
    assert state["weight_version"] == SAVE_AT and state["pending_version"] == SAVE_AT - 1
    assert (killed_dir / f"global_step_{SAVE_AT}" / PENDING_DIR / "batch.pkl").is_file()

    resumed = run_async_training(config, "one_step_off")
    assert resumed["global_steps"] == STEPS
    # the resume pushed the restored actor as version 2 before generating: same bytes as the uninterrupted run's
    assert resumed["weight_checksums"][SAVE_AT] == full["weight_checksums"][SAVE_AT]
    assert resumed["weight_checksums"][STEPS] == full["weight_checksums"][STEPS]
    assert resumed["replica_versions"] == full["replica_versions"] == [STEPS]
    assert resumed["generation_versions"] == {k: full["generation_versions"][k] for k in range(SAVE_AT + 1, STEPS + 1)}
    uninterrupted = {m["step"]: m for m in read_metrics(tmp_path / "full")}
    after = {m["step"]: m for m in read_metrics(killed_dir)}
    assert sorted(after) == list(range(1, STEPS + 1))
    for step in range(SAVE_AT + 1, STEPS + 1):
        for key in COMPARED:
            assert after[step][key] == pytest.approx(uninterrupted[step][key], rel=1e-6, abs=1e-7), (step, key)


@pytest.mark.slow  # a whole run to make the checkpoint; CI budget
def test_missing_pending_batch_is_named(ray_cluster, tmp_path):
    """A checkpoint that records a pending batch without its files is refused, naming the folder."""
    overrides = ("trainer.total_training_steps=2", "trainer.save_freq=1", "trainer.resume_mode=auto")
    config = recipe_config("one_step_off", tmp_path, *overrides)
    run_async_training(config, "one_step_off")
    step_dir = tmp_path / "global_step_1"
    (step_dir / PENDING_DIR / "batch.pkl").unlink()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1")
    with pytest.raises(Exception, match=f"{PENDING_DIR}.*lacks.*batch.pkl"):
        run_async_training(config, "one_step_off")
