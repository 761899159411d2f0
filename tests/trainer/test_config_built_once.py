"""A real ``main_ppo`` run builds its typed ``PPOConfig`` once, and the workers receive typed configs.

The run is a subprocess with a Ray cluster of its own, so that a worker-process setup hook can listen, in every
process of the run (driver, task runner, workers), to the debug lines the config build and the workers write.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.ray

_HOOK = textwrap.dedent(
    """
    import logging, os

    def listen():
        handler = logging.FileHandler(os.path.join(os.environ["CONFIG_LOG_DIR"], f"{os.getpid()}.log"))
        handler.setFormatter(logging.Formatter("%(name)s|%(message)s"))
        for name in ("verl.trainer.config.ppo_config", "verl.workers.fsdp.actor_worker"):
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
    """
)


def test_main_ppo_builds_the_config_once_and_workers_receive_typed_groups(tmp_path):
    hook_dir, log_dir, run_dir = tmp_path / "hook", tmp_path / "logs", tmp_path / "run"
    hook_dir.mkdir()
    log_dir.mkdir()
    (hook_dir / "config_log_hook.py").write_text(_HOOK)
    driver = (
        f"import sys; sys.path.insert(0, {str(hook_dir)!r}); import config_log_hook; config_log_hook.listen(); "
        "from verl.trainer.main_ppo import main; main(sys.argv[1:])"
    )
    argv = [
        "--config-name",
        "demo",
        "trainer.total_training_steps=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={run_dir}",
        "trainer.logger=[file]",
        "+ray_kwargs.ray_init.address=local",
        "+ray_kwargs.ray_init.include_dashboard=false",
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=config_log_hook.listen",
    ]
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}  # a cluster of its own
    env.update(CONFIG_LOG_DIR=str(log_dir), PYTHONPATH=str(hook_dir))  # workers inherit it from the raylet
    result = subprocess.run(
        [sys.executable, "-c", driver, *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for path in sorted(log_dir.glob("*.log")) for line in path.read_text().splitlines()]
    builds = [line for line in lines if line == "verl.trainer.config.ppo_config|PPOConfig built"]
    assert len(builds) == 1, lines
    received = [line.split("|", 1)[1] for line in lines if line.startswith("verl.workers.fsdp.actor_worker|")]
    assert received, f"no worker reported its config: {lines}"
    for report in received:
        assert "config PPOConfig" in report and "actor FSDPActorConfig" in report, report
