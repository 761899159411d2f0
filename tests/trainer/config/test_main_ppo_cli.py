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
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


def test_cfg_job_prints_flattened_groups_after_legacy_translation():
    result = _run(
        "--cfg",
        "job",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.optim.lr=2e-5",
        "data.train_batch_size=64",
        "actor.ppo_mini_batch_size=16",
    )
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert list(printed) == [
        "data",
        "model",
        "actor",
        "ref",
        "rollout",
        "critic",
        "reward",
        "algorithm",
        "trainer",
        "async_training",
        "global_profiler",
        "distillation",
        "transfer_queue",
        "skip",
        "ray_kwargs",
        "model_engine",
    ]
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

    (tmp_path / "train.parquet").touch()  # only their existence is checked before the trainer starts
    monkeypatch.setattr(main_ppo, "run_ppo", fake_run_ppo)
    monkeypatch.setattr(sys, "argv", ["main_ppo"])
    with pytest.warns(FutureWarning), pytest.raises(SystemExit) as info:
        main_ppo.main(
            [
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                "actor.ppo_micro_batch_size_per_gpu=2",
                f"data.train_files={tmp_path / 'train.parquet'}",
                "data.val_files=null",
                f"hydra.run.dir={tmp_path}",
            ]
        )
    assert info.value.code == 0
    assert "| samples per step | 8 |" in capsys.readouterr().out


def test_missing_data_files_are_named_with_the_demo(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(main_ppo, "run_ppo", lambda config: pytest.fail("the trainer must not start"))
    monkeypatch.setattr(sys, "argv", ["main_ppo"])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(SystemExit) as info:
        main_ppo.main([f"data.train_files={tmp_path / 'nope.parquet'}", f"hydra.run.dir={tmp_path}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"config error: data.train_files: file not found: {tmp_path / 'nope.parquet'}" in err
    assert "python -m verl.trainer.main_ppo --config-name demo" in err


def test_demo_config_takes_overrides(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main_ppo.main(["--config-name", "demo", "--cfg", "job", "--resolve", "trainer.total_training_steps=5"])
    assert info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["total_training_steps"] == 5 and printed["rollout"]["n"] == 8
    assert printed["algorithm"]["adv_estimator"] == "grpo"
    assert printed["data"]["train_files"] == str(tmp_path / "data" / "target_digit" / "train.parquet")
    assert (tmp_path / "data" / "target_digit" / "train.parquet").is_file()  # written for the run


def test_demo_overrides_are_the_demo_config(tmp_path):
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.demo import demo_overrides

    by_overrides = compose_ppo_config(demo_overrides(tmp_path))
    assert by_overrides.rollout.n == 8 and by_overrides.trainer.logger == ["console", "file"]
    assert by_overrides.data.train_files == str(tmp_path / "data" / "target_digit" / "train.parquet")


@pytest.mark.parametrize("name", ["ppo_megatron_trainer", "ppo_megatron_trainer.yaml"])
def test_megatron_config_name_is_refused_naming_the_backend(name, capsys):
    with pytest.raises(SystemExit) as info:
        main_ppo.main(["--config-path=config", f"--config-name={name}", "--cfg", "job"])
    assert info.value.code == 2
    assert (
        "config error: --config-name: ppo_megatron_trainer is the trainer config of verl's Megatron-LM engine, "
        "which this build does not include"
    ) in capsys.readouterr().err


def test_megatron_keys_and_engines_are_refused_naming_the_backend(capsys):
    for args, message in [
        (["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"], "Megatron-LM engine"),
        (["model_engine=megatron"], "model_engine: 'megatron' selects verl's Megatron-LM engine"),
        (["actor_rollout_ref.actor.strategy=megatron"], "actor.strategy: 'megatron' selects verl's Megatron-LM"),
        (["trainer.device=npu"], "trainer.device: 'npu': Ascend NPUs are not supported by this build"),
    ]:
        with pytest.raises(SystemExit) as info:
            main_ppo.main(["--cfg", "job", *args])
        assert info.value.code == 2
        assert message in capsys.readouterr().err, args


def _user_config_dir(tmp_path):
    folder = tmp_path / "my_configs"
    folder.mkdir()
    (folder / "my_grpo.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"  # verl's idiom (a verl checkout as cwd)
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "actor_rollout_ref:\n  rollout:\n    n: 4\nalgorithm:\n  adv_estimator: grpo\n"
        "data:\n  train_batch_size: 8\nactor:\n  ppo_mini_batch_size: 8\n"
    )
    return folder


def test_user_config_folder_builds_on_the_packaged_config(tmp_path, capsys):
    folder = _user_config_dir(tmp_path)
    with pytest.warns(FutureWarning), pytest.raises(SystemExit) as info:
        main_ppo.main([f"--config-path={folder}", "--config-name=my_grpo", "--cfg", "job", "rollout.temperature=0.5"])
    assert info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["rollout"]["n"] == 4 and printed["rollout"]["temperature"] == 0.5
    assert printed["algorithm"]["adv_estimator"] == "grpo" and "actor_rollout_ref" not in printed


def test_relative_config_path_is_relative_to_main_ppo_and_config_dir_adds_a_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:  # verl's scripts pass --config-path=config from any directory
        main_ppo.main(["--config-path=config", "--config-name=ppo_trainer", "--cfg", "job", "rollout.n=3"])
    assert info.value.code == 0 and yaml.safe_load(capsys.readouterr().out)["rollout"]["n"] == 3
    folder = _user_config_dir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main_ppo.main([f"--config-dir={folder}", "--config-name=my_grpo", "--cfg", "job"])
    assert info.value.code == 0 and yaml.safe_load(capsys.readouterr().out)["rollout"]["n"] == 4


def test_logger_as_a_plain_string(capsys):
    from verl.trainer.config import build_ppo_config
    from verl.trainer.config.compose import compose_ppo_config

    assert build_ppo_config(compose_ppo_config(["trainer.logger=console"])).trainer.logger == ["console"]
    assert build_ppo_config(compose_ppo_config(["trainer.logger=[console,file]"])).trainer.logger == ["console", "file"]


def test_names_verl_recipes_import():
    import inspect

    from verl.trainer.main_ppo import TaskRunner, create_rl_dataset, create_rl_sampler, main, run_ppo

    assert callable(main) and inspect.isclass(TaskRunner) and hasattr(TaskRunner, "run")
    assert list(inspect.signature(run_ppo).parameters) == ["config", "task_runner_class"]
    params = inspect.signature(create_rl_dataset).parameters
    assert list(params)[:5] == ["data_paths", "data_config", "tokenizer", "processor", "is_train"]
    assert params["max_samples"].default == -1
    assert list(inspect.signature(create_rl_sampler).parameters)[:2] == ["data_config", "data_source"]


def test_main_trains_with_the_given_function_and_returns_its_result(tmp_path, monkeypatch):
    monkeypatch.setattr(main_ppo, "run_ppo", lambda config: pytest.fail("train= replaces run_ppo"))
    monkeypatch.setattr(sys, "argv", ["main_ppo"])
    (tmp_path / "train.parquet").touch()
    seen = []
    args = [f"data.train_files={tmp_path / 'train.parquet'}", "data.val_files=null", f"hydra.run.dir={tmp_path}"]
    result = main_ppo.main([*args, "rollout.n=3"], train=lambda config: seen.append(config.rollout.n) or "summary")
    assert result == "summary" and seen == [3]
    assert main_ppo._TRAIN is None  # the next main() trains with run_ppo again


def test_async_recipes_share_main_ppo_s_command_line(capsys, monkeypatch):
    """The recipes' entry points take main_ppo's flags and verl's spellings over their own YAML, and fail the same
    way on a bad value."""
    from verl.experimental.fully_async_policy import fully_async_main
    from verl.experimental.one_step_off_policy import main_ppo as one_step_off_main

    monkeypatch.setattr(sys, "argv", ["recipe"])
    with pytest.raises(SystemExit) as info:
        fully_async_main.main(["--cfg", "job", "actor_rollout_ref.rollout.n=3"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert info.value.code == 0 and printed["rollout"]["n"] == 3
    assert printed["async_training"]["staleness_threshold"] == 0.5  # the recipe's YAML, not ppo_trainer's
    with pytest.raises(SystemExit) as info:
        one_step_off_main.main(["async_training.trigger_parameter_sync_step=soon"])
    assert info.value.code == 2
    assert "config error: async_training.trigger_parameter_sync_step: expected int" in capsys.readouterr().err
