"""The command line: ``python -m verl.trainer.main_ppo --cfg job`` prints the translated config; bad keys fail."""

import os
import subprocess
import sys

import pytest
import yaml

from verl.trainer import main_ppo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(*args):
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)


def test_cfg_job_prints_flattened_groups_after_legacy_translation():
    result = _run("--cfg", "job", "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.optim.lr=2e-5",
                  "data.train_batch_size=64", "actor.ppo_mini_batch_size=16")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert list(printed) == ["data", "model", "actor", "ref", "rollout", "critic", "reward", "algorithm", "trainer",
                             "async_training", "ray_kwargs"]
    assert printed["rollout"]["n"] == 8 and printed["actor"]["optim"]["lr"] == 2e-5
    assert "'actor_rollout_ref.rollout.n' is deprecated; use 'rollout.n'" in result.stderr
    assert result.stderr.count("is deprecated") == 2


def test_unknown_key_fails_naming_it():
    result = _run("--cfg", "job", "foo.bar=1")
    assert result.returncode != 0
    assert "foo.bar" in result.stderr


def test_wrong_type_fails_naming_it(capsys):
    with pytest.raises(SystemExit) as info:
        main_ppo.main(["--cfg", "job", "actor.ppo_epochs=abc"])
    assert info.value.code == 2
    assert "config error: actor.ppo_epochs: expected int, got 'abc' (str)" in capsys.readouterr().err


def test_cfg_job_in_process_prints_yaml(capsys):
    with pytest.raises(SystemExit) as info:
        main_ppo.main(["--cfg", "job", "rollout.n=2"])
    assert info.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["actor"]["rollout_n"] == "${oc.select:rollout.n,1}"


def test_run_prints_the_batch_plan_then_reaches_the_trainer(tmp_path, monkeypatch, capsys):
    def fake_run_ppo(config):
        assert config.actor.ppo_mini_batch_size == 4  # resolved, flattened DictConfig
        assert "actor_rollout_ref" not in config
        raise SystemExit(0)

    monkeypatch.setattr(main_ppo, "run_ppo", fake_run_ppo)
    monkeypatch.setattr(sys, "argv", ["main_ppo"])
    with pytest.warns(FutureWarning), pytest.raises(SystemExit) as info:
        main_ppo.main(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                       "actor.ppo_micro_batch_size_per_gpu=2", f"hydra.run.dir={tmp_path}"])
    assert info.value.code == 0
    assert "| samples per step | 8 |" in capsys.readouterr().out
