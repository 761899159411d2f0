"""How the agent-loop layer reads the flattened config: sampling parameters, validation overrides, reward switch."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.experimental.agent_loop.config import reward_in_loop_enabled, rollout_group, sampling_params_for
from verl.workers.config import (
    RewardConfig,
    RewardModelConfig,
    RewardModelPathConfig,
    RolloutConfig,
    SamplingConfig,
)

ROLLOUT = RolloutConfig(
    temperature=0.7,
    top_p=0.9,
    top_k=20,
    response_length=33,
    calculate_log_probs=True,
    val_kwargs=SamplingConfig(temperature=0.0, top_p=1.0, top_k=-1, do_sample=False),
)


def test_training_params_come_from_the_rollout_group():
    assert sampling_params_for(ROLLOUT, {}) == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "do_sample": True,
        "max_tokens": 33,
        "logprobs": True,
        "ignore_eos": False,
    }


def test_validation_uses_val_kwargs_then_explicit_meta_info():
    params = sampling_params_for(ROLLOUT, {"validate": True})
    assert (params["temperature"], params["top_p"], params["top_k"], params["do_sample"]) == (0.0, 1.0, -1, False)
    params = sampling_params_for(
        ROLLOUT, {"validate": True, "temperature": 0.5, "do_sample": True, "top_k": 3, "top_p": 0.8, "global_steps": 4}
    )
    assert (params["temperature"], params["top_p"], params["top_k"], params["do_sample"]) == (0.5, 0.8, 3, True)
    assert "global_steps" not in params


def test_reward_in_loop_switch():
    assert reward_in_loop_enabled({"reward": RewardConfig()}) is False
    assert reward_in_loop_enabled({"reward": RewardConfig(launch_reward_fn_async=True)}) is True
    with_rm = RewardConfig(
        launch_reward_fn_async=True, reward_model=RewardModelConfig(enable=True, model=RewardModelPathConfig(path="/m"))
    )
    assert reward_in_loop_enabled({"reward": with_rm}) is False
    assert reward_in_loop_enabled({"reward": RewardConfig()}, override=True) is True
    assert reward_in_loop_enabled({}, override=None) is False


def test_rollout_group_reads_dictconfig_once_and_names_bad_keys():
    config = OmegaConf.create({"rollout": {"response_length": 7}})
    first = rollout_group(config)
    assert first.response_length == 7 and rollout_group(config) is first
    with pytest.raises(ConfigError, match="rollout"):
        rollout_group(OmegaConf.create({"model": {}}))
    with pytest.raises(Exception, match="rollout.temperature"):
        rollout_group(OmegaConf.create({"rollout": {"temperature": -1.0}}))


class CustomManager:
    """A manager class chosen by rollout.agent.agent_loop_manager_class."""

    @classmethod
    async def create(cls, config, worker_group=None, rollout_resource_pool=None, **kwargs):
        return ("custom", worker_group, kwargs["max_sessions"])


def test_custom_manager_class_is_created_instead(tiny_model_dir):
    import asyncio

    from _agent_loop_helpers import make_config

    from verl.experimental.agent_loop import AgentLoopManager
    from verl.workers.config import AgentLoopConfig

    agent = AgentLoopConfig(agent_loop_manager_class=f"{__name__}.CustomManager")
    config = make_config(tiny_model_dir, agent=agent)
    assert asyncio.run(AgentLoopManager.create(config, worker_group="wg", max_sessions=3)) == ("custom", "wg", 3)

    bad = make_config(tiny_model_dir, agent=AgentLoopConfig(agent_loop_manager_class="builtins.dict"))
    with pytest.raises(
        TypeError, match="rollout.agent.agent_loop_manager_class='builtins.dict': .* async classmethod create"
    ):
        asyncio.run(AgentLoopManager.create(bad))
