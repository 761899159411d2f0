"""Legacy key translation: overrides and YAML blocks, one warning per key, explicit values always win."""

import pytest
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config.inert_keys import InertConfigWarning
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
    # reward_model.reward_manager is current in verl 0.9.1 and hybrid_engine=True is verl's default: both silent
    assert len(messages) == 4 and len(record) == 4
    assert "'actor_rollout_ref.rollout.n' is deprecated; use 'rollout.n'" in messages[0]


@pytest.mark.parametrize(
    "override",
    [
        "custom_reward_function.path=/tmp/r.py",
        "reward_model.enable=true",
        "reward_model.model.path=/m",
        "sandbox_fusion.url=http://x",
        "critic.fsdp.param_offload=true",
        "reward.reward_manager.name=dapo",
        "reward.reward_model.model_path=/m",
    ],
)
def test_spellings_current_in_verl_0_9_1_are_translated_silently(override, recwarn):
    new, messages = translate_legacy_overrides([override])
    assert messages == [] and not [w for w in recwarn if issubclass(w.category, FutureWarning)]
    assert new[0].split("=")[0] != override.split("=")[0]


def test_a_key_without_effect_is_dropped_with_its_reason():
    with pytest.warns(
        InertConfigWarning,
        match=r"actor_rollout_ref.hybrid_engine=False has no effect in this build "
        r"\(actor and rollout share processes unless rollout.nnodes > 0\)",
    ):
        new, _ = translate_legacy_overrides(["actor_rollout_ref.hybrid_engine=False"])
    assert new == []
    with pytest.warns(InertConfigWarning, match="verl removed it"):
        assert translate_legacy_overrides(["critic.model.fsdp_config.grad_offload=True"])[0] == []


def test_values_that_cannot_be_honoured_are_refused_by_key():
    with pytest.raises(ConfigError, match=r"^reward.reward_manager.source: 'importlib' cannot be honoured"):
        translate_legacy_overrides(["reward.reward_manager.source=importlib"])
    assert translate_legacy_overrides(["reward.reward_manager.source=register"])[0] == []
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref.actor.megatron.tensor_model_parallel_size: a setting "
        r"of verl's Megatron-LM engine",
    ):
        translate_legacy_overrides(["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"])


def test_plus_on_an_existing_key_and_new_free_form_keys_are_accepted():
    new, _ = translate_legacy_overrides(
        [
            "+trainer.val_before_train=False",
            "rollout.engine_kwargs.vllm.x=1",
            "+rollout.engine_kwargs.sglang.y=2",
            "trainer.total_epochs=2",
        ]
    )
    assert new == [
        "++trainer.val_before_train=False",
        "++rollout.engine_kwargs.vllm.x=1",
        "++rollout.engine_kwargs.sglang.y=2",
        "trainer.total_epochs=2",
    ]


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
    # one warning per translated block (custom_reward_function is current in verl 0.9.1: none for it)
    assert len(messages) == len(record) == 2
    assert "config block 'actor_rollout_ref.rollout' (2 keys) is deprecated" in messages[0]


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
