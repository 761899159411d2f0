"""to_ppo_config: the one conversion from a DictConfig to PPOConfig, reused while the DictConfig is unchanged."""

import pickle

import pytest
from omegaconf import OmegaConf, open_dict

from verl.base_config import ConfigError
from verl.trainer.config import PPOConfig, compose_ppo_config, to_ppo_config
from verl.trainer.config.legacy_view import add_legacy_view
from verl.trainer.config.resolve import attached_ppo_config
from verl.utils.config import validate_config


@pytest.fixture(scope="module")
def composed():
    return compose_ppo_config(["rollout.n=4", "actor.ppo_mini_batch_size=2", "data.train_batch_size=8"])


def test_a_typed_config_is_returned_as_it_is(composed):
    typed = to_ppo_config(composed.copy())
    assert to_ppo_config(typed) is typed


def test_an_unchanged_config_reuses_its_build_and_a_changed_one_is_built_again(composed):
    config = composed.copy()
    first = to_ppo_config(config)
    assert isinstance(first, PPOConfig) and first.rollout.n == 4
    assert to_ppo_config(config) is first
    with open_dict(config):
        config.rollout.n = 2
    second = to_ppo_config(config)
    assert second is not first and second.rollout.n == 2
    assert first.rollout.n == 4  # the earlier object is untouched


def test_the_attached_build_travels_with_a_pickled_config(composed):
    config = composed.copy()
    typed = to_ppo_config(config)
    unpickled = pickle.loads(pickle.dumps(config))
    assert attached_ppo_config(unpickled) == typed
    assert attached_ppo_config(OmegaConf.create(OmegaConf.to_container(config))) is None  # a copy is not paired


def test_verl_spellings_and_the_trainer_view_convert_too(composed):
    legacy = OmegaConf.create(OmegaConf.to_container(composed))
    legacy.actor_rollout_ref = {"actor": {"ppo_epochs": 3}}  # a recipe's YAML block in verl's spelling
    assert to_ppo_config(legacy).actor.ppo_epochs == 3
    viewed = add_legacy_view(OmegaConf.create(OmegaConf.to_container(composed, resolve=True)))
    assert to_ppo_config(viewed).rollout.n == 4
    assert validate_config(viewed).rollout.n == 4  # verl's public name takes the same path


def test_a_bad_value_is_named(composed):
    config = composed.copy()
    with open_dict(config):
        config.actor.ppo_epochs = "many"
    with pytest.raises(ConfigError, match="actor.ppo_epochs"):
        to_ppo_config(config)
    with pytest.raises(ConfigError, match="expected a DictConfig or a mapping"):
        to_ppo_config(42)
