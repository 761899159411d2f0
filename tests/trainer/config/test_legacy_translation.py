"""Legacy key translation: overrides and YAML blocks, one warning per key, explicit values always win."""

import pytest
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config.legacy import (
    LegacyConfigWarning,
    translate_legacy_config,
    translate_legacy_key,
    translate_legacy_overrides,
)


@pytest.mark.parametrize(
    "old, new",
    [
        ("actor_rollout_ref.rollout.n", "rollout.n"),
        ("actor_rollout_ref.actor.optim.lr", "actor.optim.lr"),
        ("actor_rollout_ref.model.path", "model.path"),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", "ref.fsdp_config.param_offload"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor.log_prob_micro_batch_size_per_gpu"),
        ("reward_model.reward_manager", "reward.reward_manager"),
        ("reward_model.enable", "reward.reward_model.enable"),
        ("reward_model.model.path", "reward.reward_model.model.path"),
        ("custom_reward_function.path", "reward.custom_reward_function.path"),
        ("trainer.n_gpus_per_node", "trainer.n_gpus_per_node"),
        ("rollout.n", "rollout.n"),
    ],
)
def test_key_mapping(old, new):
    assert translate_legacy_key(old) == new


def test_overrides_are_rewritten_with_one_warning_per_key():
    overrides = [
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.optim.lr=1e-5",
        "+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
        "~actor_rollout_ref.model.custom_chat_template",
        "++reward_model.reward_manager=batch",
        "actor_rollout_ref.hybrid_engine=True",
        "data.train_batch_size=16",
    ]
    with pytest.warns(LegacyConfigWarning) as record:
        new, messages = translate_legacy_overrides(overrides)
    assert new == [
        "rollout.n=8",
        "actor.optim.lr=1e-5",
        "++actor.fsdp_config.model_dtype=bf16",
        "~model.custom_chat_template",
        "++reward.reward_manager=batch",
        "data.train_batch_size=16",
    ]
    assert len(messages) == 6 and len(record) == 6
    assert "'actor_rollout_ref.rollout.n' is deprecated; use 'rollout.n'" in messages[0]
    assert "'actor_rollout_ref.hybrid_engine' is deprecated and has no effect" in messages[5]


def test_same_key_both_ways_with_equal_values_collapses():
    with pytest.warns(LegacyConfigWarning):
        new, messages = translate_legacy_overrides(
            ["actor_rollout_ref.rollout.n_gpus_per_node=4", "rollout.n_gpus_per_node=4"]
        )
    assert new == ["rollout.n_gpus_per_node=4"]
    assert len(messages) == 1


def test_same_key_both_ways_with_different_values_fails_naming_both():
    with pytest.warns(LegacyConfigWarning), pytest.raises(ConfigError) as info:
        translate_legacy_overrides(["rollout.n_gpus_per_node=2", "actor_rollout_ref.rollout.n_gpus_per_node=4"])
    message = str(info.value)
    assert message.startswith("rollout.n_gpus_per_node: set twice with different values")
    assert "'rollout.n_gpus_per_node=2'" in message and "'actor_rollout_ref.rollout.n_gpus_per_node=4'" in message


def test_a_whole_legacy_group_cannot_be_overridden():
    with pytest.raises(ConfigError, match="^actor_rollout_ref: a whole legacy group"):
        translate_legacy_overrides(["actor_rollout_ref=foo"])


def _composed():
    return OmegaConf.create(
        {
            "rollout": {"n": 1, "n_gpus_per_node": "${trainer.n_gpus_per_node}"},
            "actor": {"ppo_mini_batch_size": 256, "ppo_micro_batch_size_per_gpu": 8},
            "trainer": {"n_gpus_per_node": 1},
            "reward": {"reward_manager": "naive", "custom_reward_function": {"path": None}},
        }
    )


def test_yaml_block_beats_defaults_and_interpolations_follow():
    cfg = _composed()
    cfg.actor_rollout_ref = {
        "rollout": {"n_gpus_per_node": 4, "n": 2},
        "actor": {"ppo_micro_batch_size_per_gpu": "${actor_rollout_ref.rollout.n}"},
    }
    cfg.custom_reward_function = {"path": "my_reward.py"}
    with pytest.warns(LegacyConfigWarning) as record:
        cfg, messages = translate_legacy_config(cfg, defaults=_composed())
    assert "actor_rollout_ref" not in cfg and "custom_reward_function" not in cfg
    assert cfg.rollout.n_gpus_per_node == 4 and cfg.rollout.n == 2
    assert cfg.actor.ppo_micro_batch_size_per_gpu == 2  # ${actor_rollout_ref.rollout.n} -> ${rollout.n}
    assert cfg.reward.custom_reward_function.path == "my_reward.py"
    assert len(messages) == len(record) == 4


def test_command_line_value_beats_a_legacy_yaml_value():
    cfg = _composed()
    cfg.rollout.n_gpus_per_node = 2  # what Hydra composed from the override rollout.n_gpus_per_node=2
    cfg.actor_rollout_ref = {"rollout": {"n_gpus_per_node": 4}}
    with pytest.warns(LegacyConfigWarning):
        cfg, _ = translate_legacy_config(cfg, explicit_keys=["rollout.n_gpus_per_node"], defaults=_composed())
    assert cfg.rollout.n_gpus_per_node == 2


def test_yaml_sets_both_spellings_differently_fails_naming_both():
    cfg = _composed()
    cfg.rollout.n = 3
    cfg.actor_rollout_ref = {"rollout": {"n": 5}}
    with pytest.warns(LegacyConfigWarning), pytest.raises(ConfigError) as info:
        translate_legacy_config(cfg, defaults=_composed())
    assert "actor_rollout_ref.rollout.n: 5" in str(info.value) and "rollout.n: 3" in str(info.value)


def test_equal_values_are_compared_as_parsed_values():
    with pytest.warns(LegacyConfigWarning):
        new, _ = translate_legacy_overrides(["actor_rollout_ref.actor.optim.lr=1e-5", "actor.optim.lr=0.00001"])
    assert new == ["actor.optim.lr=1e-5"]
