"""A run killed with ``kill -9`` while it writes a checkpoint resumes from the previous complete one.

The demo run saves every step; the test watches the checkpoint folder and, once the newest ``global_step_k`` has its
actor folder but no ``trainer_state.pt`` (the save is under way), kills the driver and its Ray cluster. The
rerun with ``trainer.resume_mode=auto`` must resume from step k-1 and log each step once more from k on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl.trainer.ppo.checkpointing import STATE_FILE, TRACKER_FILE

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[3]


def _command(root: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "--config-name",
        "demo",
        f"trainer.default_local_dir={root}",
        "trainer.save_freq=1",
        "trainer.logger=[console,file]",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        *extra,
    ]


def _saving(root: Path, first_step: int) -> int | None:
    """The step whose checkpoint is being written now (the newest folder, actor files but no trainer state)."""
    folders = sorted(root.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    if not folders:
        return None
    newest = folders[-1]
    step = int(newest.name.rsplit("_", 1)[1])
    if step >= first_step and (newest / "actor").exists() and not (newest / STATE_FILE).exists():
        return step
    return None


def _kill_run(pid: int) -> None:
    """SIGKILL the driver and every process it started (its Ray cluster: GCS, raylet, the workers that train), and
    nothing else on the machine."""
    import psutil

    try:
        driver = psutil.Process(pid)
        family = [*driver.children(recursive=True), driver]
    except psutil.NoSuchProcess:
        return
    for process in family:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=30)


def test_a_run_killed_while_saving_resumes_from_the_previous_checkpoint(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115 - closed below, after the process is gone
    run = subprocess.Popen(
        _command(tmp_path, "trainer.total_training_steps=8"), env=env, start_new_session=True, stdout=log, stderr=log
    )
    killed_at = None
    deadline = time.monotonic() + 600
    try:
        while run.poll() is None and time.monotonic() < deadline:
            killed_at = _saving(tmp_path, first_step=3)
            if killed_at is not None:
                _kill_run(run.pid)  # the trainer runs in the run's Ray workers, not in the driver
                break
            time.sleep(0.01)
    finally:
        _kill_run(run.pid)
        run.wait()
        log.close()
    if killed_at is None:
        pytest.fail(f"the run never was caught saving a checkpoint; see {tmp_path / 'first.log'}")
    assert not (tmp_path / f"global_step_{killed_at}" / STATE_FILE).exists()
    assert (tmp_path / TRACKER_FILE).read_text() == str(killed_at - 1)

    rerun = subprocess.run(
        _command(tmp_path, f"trainer.total_training_steps={killed_at + 1}", "trainer.resume_mode=auto"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    logged = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line]
    first_run = [step for step in logged[: logged.index(killed_at - 1) + 1]]
    assert first_run == list(range(1, killed_at))  # the first run logged up to k-1 (step k died in its save)
    assert logged[len(first_run) :] == [killed_at, killed_at + 1]  # resumed from k-1: step k again, then k+1
    assert (tmp_path / TRACKER_FILE).read_text() == str(killed_at + 1)
