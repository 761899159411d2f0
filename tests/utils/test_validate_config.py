"""verl.utils.config.validate_config runs the trainer's typed validation on verl-shaped and native configs."""

from __future__ import annotations

import warnings

import pytest
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config import PPOConfig
from verl.trainer.config.compose import default_ppo_config
from verl.trainer.config.legacy_view import add_legacy_view
from verl.utils.config import validate_config


def test_default_config_passes_and_returns_the_typed_config():
    cfg = default_ppo_config()
    assert isinstance(validate_config(cfg, use_reference_policy=True, use_critic=False), PPOConfig)


def test_config_with_the_trainer_alias_node_passes():
    cfg = add_legacy_view(default_ppo_config())
    assert isinstance(validate_config(cfg, True, True), PPOConfig)
    assert "actor_rollout_ref" in cfg  # the caller's config is untouched


def test_bad_value_in_verl_spelling_is_reported_under_its_key():
    cfg = default_ppo_config()
    OmegaConf.set_struct(cfg, False)
    legacy = OmegaConf.merge(cfg, {"actor_rollout_ref": {"actor": {"ppo_epochs": "abc"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError, match=r"actor\.ppo_epochs: expected int"):
            validate_config(legacy, False, False)
    assert legacy.actor_rollout_ref.actor.ppo_epochs == "abc"


def test_inconsistent_groups_are_refused():
    cfg = OmegaConf.merge(default_ppo_config(), {"data": {"max_prompt_length": 4096}, "rollout": {"prompt_length": 8}})
    with pytest.raises(ConfigError, match="rollout.prompt_length"):
        validate_config(cfg, True, False)
