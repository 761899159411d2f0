"""Names verl recipes import from verl.trainer.main_ppo and the agent-loop module beyond the CLI itself."""

from __future__ import annotations

from types import SimpleNamespace

from omegaconf import OmegaConf


def test_main_ppo_exports_device_and_reward_helpers():
    from verl.experimental.reward_loop.migrate import migrate_legacy_reward_impl as migrate
    from verl.trainer.main_ppo import auto_set_device, migrate_legacy_reward_impl
    from verl.utils import device

    assert auto_set_device is device.auto_set_device and migrate_legacy_reward_impl is migrate
    config = SimpleNamespace(trainer=SimpleNamespace(device="cpu"))
    auto_set_device(config)
    assert config.trainer.device == "cpu"  # running on the CPU stays a choice
    legacy = OmegaConf.create({"reward_model": {"reward_manager": "dapo"}, "reward": {"reward_manager": "naive"}})
    assert migrate_legacy_reward_impl(legacy).reward.reward_manager == "dapo" and "reward_model" not in legacy


def test_dummy_config_is_the_agent_loop_config_wrapper():
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _DummyConfig, _unwrap

    wrapped = _DummyConfig(config={"rollout": {"n": 2}})
    assert isinstance(wrapped, DictConfigWrap) and _unwrap(wrapped) == {"rollout": {"n": 2}}
