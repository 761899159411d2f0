"""Keys, config classes and legacy reward keys a recipe supplies are kept and honoured, never dropped silently."""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from dataclasses import dataclass

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from verl.base_config import BaseConfig, ConfigError
from verl.trainer.config.recipe_keys import RecipeKeyWarning, warn_recipe_keys
from verl.trainer.ppo.reward import load_reward_manager, reward_settings
from verl.trainer.ppo.utils import need_reference_policy, need_reward_model
from verl.utils.config import validate_config
from verl.workers.config import ActorConfig, FSDPActorConfig


@dataclass
class RecipeActorConfig(BaseConfig):
    """A recipe's own actor config: not a subclass of ours."""

    ppo_epochs: int = 3
    aux_coef: float = 0.0


def _compose(*overrides: str):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(overrides))
    return cfg


def _typed(cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return validate_config(cfg)


def test_a_recipe_s_keys_under_our_groups_are_kept_and_named_once():
    cfg = _compose("+algorithm.length_bonus=0.25", "+actor_rollout_ref.actor.aux.coef=2", "+rollout.my_flag=true")
    typed = _typed(cfg)
    assert typed.algorithm.length_bonus == 0.25 and typed.algorithm["length_bonus"] == 0.25
    assert typed.actor.aux.coef == 2  # a nested block reads by attribute
    assert typed.rollout.my_flag is True and "my_flag" in typed.rollout
    kept = dataclasses.replace(typed.actor, ppo_epochs=2)  # what the trainer hands the workers keeps them
    assert kept.aux.coef == 2 and pickle.loads(pickle.dumps(kept)).aux.coef == 2
    with pytest.warns(RecipeKeyWarning) as caught:
        messages = warn_recipe_keys(typed)
    assert sorted(m.split("=")[0] for m in messages) == [
        "config: actor.aux",
        "config: algorithm.length_bonus",
        "config: rollout.my_flag",
    ]
    assert len(caught) == 3


def test_a_misspelt_key_of_ours_is_still_refused():
    cfg = _compose("+actor_rollout_ref.actor.ppo_epoch=2")
    with pytest.raises(ConfigError, match=r"actor.ppo_epoch: unknown key for FSDPActorConfig \(did you mean"):
        _typed(cfg)


def test_null_for_an_estimator_the_recipe_never_uses_is_accepted_until_used():
    from verl.trainer.ppo.core_algos import compute_advantage

    typed = _typed(_compose("algorithm.adv_estimator=null"))
    assert typed.algorithm.adv_estimator is None and not typed.use_critic
    with pytest.raises(ConfigError, match="^algorithm.adv_estimator: is null"):
        compute_advantage(None, adv_estimator=typed.algorithm.adv_estimator)


def test_a_recipe_s_own_actor_config_class_stands_in_for_ours():
    target = f"{__name__}.RecipeActorConfig"
    typed = _typed(_compose(f"actor_rollout_ref.actor._target_={target}", "+actor_rollout_ref.actor.aux_coef=0.5"))
    actor = typed.actor
    assert isinstance(actor, RecipeActorConfig) and isinstance(actor, FSDPActorConfig)
    assert actor.aux_coef == 0.5 and actor.ppo_epochs == 1  # the composed node's values (our YAML's included)
    assert actor.clip_ratio == FSDPActorConfig().clip_ratio
    bare = OmegaConf.create({"_target_": target})  # without a node value, the recipe's defaults win over ours
    from verl.utils.config import omega_conf_to_dataclass

    assert omega_conf_to_dataclass(bare, FSDPActorConfig).ppo_epochs == 3
    again = pickle.loads(pickle.dumps(actor))
    assert type(again) is type(actor) and again == actor
    cfg = _compose("actor_rollout_ref.actor._target_=verl.workers.config.RolloutConfig")
    with pytest.raises(ConfigError, match="actor._target_: verl.workers.config.RolloutConfig is not a subclass"):
        _typed(cfg)
    assert issubclass(FSDPActorConfig, ActorConfig)


def test_a_legacy_key_that_picks_an_implementation_wins_over_an_untouched_default():
    cfg = _compose("reward_model.reward_manager=dapo", "actor_rollout_ref.actor.use_kl_loss=true")
    assert OmegaConf.select(cfg, "reward.reward_manager") == "naive"  # the untouched default beside it
    assert reward_settings(cfg).manager.name == "dapo"
    assert _typed(cfg).reward.reward_manager == "dapo"
    assert need_reference_policy(cfg) is True
    assert need_reward_model(_compose("reward_model.enable=true")) is True


def test_two_values_the_user_set_for_one_key_are_an_error_naming_both():
    cfg = _compose("reward_model.reward_manager=dapo", "reward.reward_manager=batch")
    with pytest.raises(ConfigError, match="set twice") as info:
        load_reward_manager(cfg, tokenizer=None)
    assert "reward_model.reward_manager" in str(info.value) and "batch" in str(info.value)
