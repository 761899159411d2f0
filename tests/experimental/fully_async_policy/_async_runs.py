"""Helpers of the async e2e tests: demo configs shrunk to a few steps, one trainer and one rollout process."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from verl.trainer.demo import demo_overrides

_SKIP = (
    "trainer.total_training_steps",
    "trainer.default_local_dir",
    "trainer.logger",
    "trainer.test_freq",
    "trainer.val_before_train",
    "trainer.n_gpus_per_node",
)
SEED = 7
STEPS = 3
# no stale group, a sync after every update, no aborted request: the fully-async run is on-policy
ON_POLICY = (
    "async_training.staleness_threshold=0",
    "async_training.trigger_parameter_sync_step=1",
    "async_training.partial_rollout=false",
)


def base_overrides(run_dir: Path, *extra: str) -> list[str]:
    overrides = [o for o in demo_overrides() if not o.startswith(_SKIP)]
    return overrides + [
        f"trainer.default_local_dir={run_dir}",
        "trainer.logger=[file]",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        f"rollout.seed={SEED}",
        # one agent-loop worker process instead of the demo's two: the tiny runs here do not need a second one,
        # and each Ray worker costs seconds of CPU to start (row seeds are global, so samples do not depend on it)
        "rollout.agent.num_workers=1",
        *extra,
    ]


def recipe_config(recipe: str, run_dir: Path, *extra: str):
    from recipe._entry import compose_recipe_config

    if recipe == "fully_async":
        from recipe.fully_async_policy.fully_async_main import CONFIG_DIR, CONFIG_NAME
    else:
        from recipe.one_step_off_policy.main_ppo import CONFIG_DIR, CONFIG_NAME
    return compose_recipe_config(CONFIG_DIR, CONFIG_NAME, base_overrides(run_dir, *extra))


@cache
def sync_reference(steps: int = STEPS) -> tuple[dict, ...]:
    """Per-step metrics of the synchronous trainer (colocated, one process) with the same seeds, shared by the
    fully-async and one-step-off tests: computed once per test session, by whichever pytest-xdist worker asks first
    (the others wait on a file lock, then read its metrics)."""
    import fcntl
    import os
    import shutil
    import tempfile

    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config
    from verl.trainer.ppo.task_runner import run_ppo
    from verl.utils.tracking import read_metrics

    session = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    shared_dir = Path(tempfile.gettempdir()) / f"verl_sync_reference_{session}_{steps}"
    shared_dir.mkdir(exist_ok=True)
    run_dir, done = shared_dir / "run", shared_dir / "done"
    with open(shared_dir / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            shutil.rmtree(run_dir, ignore_errors=True)  # what a failed attempt of another worker left
            config, _ = resolve_config(
                compose_ppo_config(base_overrides(run_dir, f"trainer.total_training_steps={steps}"))
            )
            run_ppo(config)
            done.touch()
    return tuple(read_metrics(run_dir))


def wait_for_checkpoint(run_dir: Path, step: int, timeout_s: float = 300.0) -> None:
    """Poll until the checkpoint tracker names ``step`` (the checkpoint is then complete on disk) and the step's
    metrics row is logged (the trainer logs it after the step's last stage, a moment after the save)."""
    import time

    from verl.trainer.ppo.checkpointing import TRACKER_FILE
    from verl.utils.tracking import read_metrics

    def done() -> bool:
        if not (tracker.is_file() and tracker.read_text().strip() == str(step)):
            return False
        try:
            return any(m["step"] == step for m in read_metrics(run_dir))
        except (FileNotFoundError, ValueError):  # not written yet, or a line half written
            return False

    deadline = time.monotonic() + timeout_s
    tracker = run_dir / TRACKER_FILE
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.05)
    raise TimeoutError(f"no checkpoint and metrics of step {step} in {run_dir} after {timeout_s:g}s")


def kill_after_checkpoint(config, kind: str, step: int) -> int:
    """Start a recipe run in its own task-runner actor and kill it (with every actor it owns) as soon as the
    checkpoint of ``step`` is complete; returns the newest checkpointed step at the kill."""
    import pytest
    import ray
    from omegaconf import OmegaConf

    from verl.experimental.separation.task_runner import AsyncTaskRunner
    from verl.trainer.ppo.checkpointing import TRACKER_FILE
    from verl.trainer.ppo.task_runner import TASK_RUNNER_CPUS

    run_dir = Path(config.trainer.default_local_dir)
    runner = ray.remote(num_cpus=TASK_RUNNER_CPUS)(AsyncTaskRunner).remote(kind)
    pending = runner.run.remote(OmegaConf.to_container(config, resolve=True))
    wait_for_checkpoint(run_dir, step)
    ray.kill(runner, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(pending, timeout=120)
    return int((run_dir / TRACKER_FILE).read_text().strip())
