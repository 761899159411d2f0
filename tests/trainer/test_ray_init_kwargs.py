"""How a run joins Ray: ray_kwargs.ray_init (address included) as given, $RAY_ADDRESS (set by `ray job submit`)
winning over it, and the workers' environment under the user's own."""

from __future__ import annotations

from omegaconf import OmegaConf

from verl.trainer.ppo.task_runner import _ray_init_kwargs


def _config(**ray_init):
    return OmegaConf.create({"ray_kwargs": {"ray_init": ray_init}, "global_profiler": {"tool": None}})


def test_ray_init_address_and_resources_are_passed_as_given(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    kwargs = _config(
        address="10.0.0.5:6379",
        num_cpus=None,
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "true", "MY_FLAG": "1"}},
    )
    kwargs = _ray_init_kwargs(kwargs)
    assert kwargs["address"] == "10.0.0.5:6379"
    assert "num_cpus" not in kwargs  # null keys are left to Ray
    assert kwargs["runtime_env"]["env_vars"]["MY_FLAG"] == "1"
    assert kwargs["runtime_env"]["env_vars"]["TOKENIZERS_PARALLELISM"] == "true"  # the user's value wins


def test_ray_address_from_the_environment_wins_and_drops_local_resources(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.9:8265")
    kwargs = _ray_init_kwargs(_config(address="10.0.0.5:6379", num_cpus=8, num_gpus=0))
    assert kwargs["address"] == "http://10.0.0.9:8265"
    assert "num_cpus" not in kwargs and "num_gpus" not in kwargs  # Ray refuses them when joining a cluster


def test_ray_address_local_starts_a_cluster_of_the_given_size(monkeypatch):
    # RAY_ADDRESS=local keeps a run off any cluster `ray start` left on this machine (benches, recipe tests)
    monkeypatch.setenv("RAY_ADDRESS", "local")
    kwargs = _ray_init_kwargs(_config(num_cpus=4))
    assert kwargs["address"] == "local" and kwargs["num_cpus"] == 4
