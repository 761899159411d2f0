"""Composing ppo_trainer.yaml with Hydra: defaults, flattened overrides, legacy overrides and YAML files."""

import dataclasses
import textwrap
import warnings

import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config import GROUPS, PPOConfig, build_ppo_config
from verl.trainer.config.compose import compose_ppo_config, default_ppo_config
from verl.trainer.config.legacy import LegacyConfigWarning
from verl.workers.config import BUILTIN_TINY_MODEL, FSDPActorConfig, FSDPCriticConfig

# verl's top-level blocks, read little or not at all here (inert_keys.py)
VERL_BLOCKS = ["global_profiler", "distillation", "transfer_queue", "skip"]


@pytest.fixture(scope="module")
def defaults():
    return default_ppo_config()


def test_default_config_composes_and_validates():
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer")
    # verl's nested spelling and top-level reward blocks are composed too (so a recipe's own @hydra.main accepts
    # verl's overrides), and translated away before validation
    mirrors = ["actor_rollout_ref", "custom_reward_function", "reward_model", "sandbox_fusion"]
    assert sorted(cfg.keys()) == sorted([*GROUPS, *VERL_BLOCKS, "ray_kwargs", "model_engine", *mirrors])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = compose_ppo_config([])
    assert not [w for w in caught if issubclass(w.category, LegacyConfigWarning)]  # nobody set the mirrors
    assert list(cfg.keys()) == [*GROUPS, *VERL_BLOCKS, "ray_kwargs", "model_engine"]
    typed = build_ppo_config(cfg)
    assert isinstance(typed, PPOConfig)
    assert isinstance(typed.actor, FSDPActorConfig) and isinstance(typed.critic, FSDPCriticConfig)
    assert typed.model.path == BUILTIN_TINY_MODEL and typed.model.tokenizer_path == BUILTIN_TINY_MODEL
    assert typed.rollout.name == "hf" and typed.rollout.mode == "async" and typed.rollout.nnodes == 0
    assert typed.trainer.device == "auto" and typed.trainer.logger == ["console"]
    assert typed.trainer.default_local_dir == "checkpoints/verl_examples/demo"
    assert typed.ray_kwargs == {"ray_init": {"num_cpus": None}, "timeline_json_file": None}


def test_flattened_overrides_and_interpolated_defaults():
    cfg = compose_ppo_config(
        [
            "rollout.n=4",
            "data.max_prompt_length=64",
            "actor.ppo_epochs=2",
            "actor.optim.lr=3e-4",
            "trainer.n_gpus_per_node=2",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=32",
            "actor.ppo_mini_batch_size=8",
        ]
    )
    typed = build_ppo_config(cfg)
    assert typed.rollout.n == 4 and typed.actor.rollout_n == 4 and typed.critic.rollout_n == 4
    assert typed.rollout.prompt_length == 64  # follows data.max_prompt_length
    assert typed.rollout.n_gpus_per_node == 2  # follows trainer.n_gpus_per_node
    assert typed.actor.optim.lr == 3e-4 and typed.critic.optim.lr == 1e-5
    assert typed.critic.ppo_epochs == 2 and typed.critic.ppo_mini_batch_size == 8  # follow the actor
    assert typed.ref.log_prob_micro_batch_size_per_gpu == typed.actor.log_prob_micro_batch_size_per_gpu
    assert typed.actor.optim.clip_grad == typed.actor.grad_clip
    assert not typed.use_critic and not typed.use_reference_policy


def test_legacy_overrides_resolve_like_flattened_ones():
    nested = [
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.optim.lr=3e-4",
        "actor_rollout_ref.model.path=/models/tiny",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    ]
    current = ["reward_model.reward_manager=batch", "custom_reward_function.path=/tmp/reward.py"]
    with pytest.warns(LegacyConfigWarning) as record:
        cfg = compose_ppo_config(nested + current)
    # verl's nested layout warns once per key; the reward keys are current in verl 0.9.1 and translate silently
    legacy = [w for w in record if issubclass(w.category, LegacyConfigWarning)]
    assert {str(w.message).split("'")[1] for w in legacy} == {o.split("=")[0] for o in nested}
    assert "actor_rollout_ref" not in cfg and "reward_model" not in cfg
    typed = build_ppo_config(cfg)
    assert typed.rollout.n == 4 and typed.actor.optim.lr == 3e-4
    assert typed.model.path == "/models/tiny" and typed.critic.model.path == "/models/tiny"
    assert typed.actor.use_kl_loss and typed.use_reference_policy
    assert typed.ref.fsdp_config.param_offload
    assert typed.reward.reward_manager == "batch"
    assert typed.reward.custom_reward_function.path == "/tmp/reward.py"


@pytest.mark.parametrize(
    "overrides",
    [
        ["actor_rollout_ref.rollout.n_gpus_per_node=4", "rollout.n_gpus_per_node=4"],
        ["rollout.n_gpus_per_node=4", "actor_rollout_ref.rollout.n_gpus_per_node=4"],
        ["actor_rollout_ref.rollout.n_gpus_per_node=4"],
    ],
)
def test_rollout_resources_given_both_ways(overrides):
    with pytest.warns(LegacyConfigWarning):
        cfg = compose_ppo_config([*overrides, "rollout.nnodes=1"])
    assert cfg.rollout.n_gpus_per_node == 4 and cfg.rollout.nnodes == 1
    assert cfg.trainer.n_gpus_per_node == 1  # the trainer default is untouched


def test_rollout_resources_given_both_ways_with_different_values_fails():
    with pytest.warns(LegacyConfigWarning), pytest.raises(ConfigError, match="rollout.n_gpus_per_node: set twice"):
        compose_ppo_config(["actor_rollout_ref.rollout.n_gpus_per_node=4", "rollout.n_gpus_per_node=2"])


def _user_yaml(tmp_path, body):
    (tmp_path / "user.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        + textwrap.dedent(body)
    )
    return str(tmp_path)


def test_legacy_yaml_value_beats_the_default_and_cli_beats_the_yaml(tmp_path):
    config_dir = _user_yaml(
        tmp_path,
        """
        actor_rollout_ref:
          rollout:
            n_gpus_per_node: 4
            n: 2
        trainer:
          n_gpus_per_node: 2
        """,
    )
    with pytest.warns(LegacyConfigWarning):
        cfg = compose_ppo_config(config_name="user", config_dir=config_dir)
    # The default of rollout.n_gpus_per_node is ${trainer.n_gpus_per_node} (= 2 here); the YAML said 4.
    assert cfg.rollout.n_gpus_per_node == 4 and cfg.rollout.n == 2
    with pytest.warns(LegacyConfigWarning):
        cfg = compose_ppo_config(["rollout.n_gpus_per_node=8"], config_name="user", config_dir=config_dir)
    assert cfg.rollout.n_gpus_per_node == 8 and cfg.rollout.n == 2
    with pytest.warns(LegacyConfigWarning):
        cfg = compose_ppo_config(
            ["actor_rollout_ref.rollout.n_gpus_per_node=8"], config_name="user", config_dir=config_dir
        )
    assert cfg.rollout.n_gpus_per_node == 8


def test_unknown_key_fails_with_its_name():
    with pytest.raises(ConfigCompositionException, match="Could not override 'actor.ppo_epoch'"):
        compose_ppo_config(["actor.ppo_epoch=2"])
    with pytest.warns(LegacyConfigWarning), pytest.raises(ConfigCompositionException, match="'rollout.not_a_key'"):
        compose_ppo_config(["actor_rollout_ref.rollout.not_a_key=1"])


def test_unknown_key_in_a_user_yaml_fails_with_its_name(tmp_path):
    config_dir = _user_yaml(tmp_path, "actor:\n  ppo_epoch: 2\n")
    cfg = compose_ppo_config(config_name="user", config_dir=config_dir)
    with pytest.raises(ConfigError, match=r"^actor.ppo_epoch: unknown key for FSDPActorConfig \(did you mean"):
        build_ppo_config(cfg)


def test_wrong_type_fails_with_the_key():
    cfg = compose_ppo_config(["actor.ppo_epochs=abc"])
    with pytest.raises(ConfigError, match=r"^actor.ppo_epochs: expected int, got 'abc' \(str\)$"):
        build_ppo_config(cfg)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["data.train_batch_size=16", "actor.ppo_mini_batch_size=32"],
            r"^actor.ppo_mini_batch_size: \(32\) is larger than data.train_batch_size \(16\)",
        ),
        (
            ["data.train_batch_size=16", "actor.ppo_mini_batch_size=8", "critic.ppo_mini_batch_size=32"],
            r"^critic.ppo_mini_batch_size: \(32\) is larger than data.train_batch_size \(16\)",
        ),
        (
            ["data.train_batch_size=6", "actor.ppo_mini_batch_size=3", "trainer.n_gpus_per_node=4"],
            r"^data.train_batch_size: \(6\) x rollout.n \(1\) = 6 samples do not split evenly over the 4 trainer",
        ),
        (
            ["data.train_batch_size=8", "actor.ppo_mini_batch_size=3", "trainer.n_gpus_per_node=2"],
            r"^actor.ppo_mini_batch_size: \(3\) x rollout.n \(1\) = 3 samples do not split evenly over the 2",
        ),
        (["actor.rollout_n=2"], r"^actor.rollout_n: \(2\) must equal rollout.n \(1\)"),
        (["actor.clip_ratio_c=0.5"], r"^actor.clip_ratio_c: must be > 1"),
        (["actor.loss_agg_mode=sum"], r"^actor.loss_agg_mode: must be one of"),
    ],
)
def test_inconsistent_values_fail_with_the_keys(defaults, overrides, message):
    cfg = defaults.copy()
    for override in overrides:
        key, value = override.split("=")
        OmegaConf.update(cfg, key, yaml.safe_load(value))
    with pytest.raises(ConfigError, match=message):
        build_ppo_config(cfg)


def test_inconsistent_batch_sizes_through_hydra():
    cfg = compose_ppo_config(["data.train_batch_size=16", "actor.ppo_mini_batch_size=32"])
    with pytest.raises(ConfigError, match=r"^actor.ppo_mini_batch_size: \(32\) is larger than data.train_batch_s"):
        build_ppo_config(cfg)


def _field_default(field):
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


# Groups whose YAML lists only what differs from, or derives from, another group.
_PARTIAL_YAML = {"ref"}


def _compare(node, instance, prefix, problems):
    fields = {f.name: f for f in dataclasses.fields(instance) if not f.name.startswith("_")}
    keys = set(node) - {"_target_"}
    if prefix not in _PARTIAL_YAML and keys != set(fields):
        problems.append(
            f"{prefix}: yaml-only {sorted(keys - set(fields))}, dataclass-only {sorted(set(fields) - keys)}"
        )
    for key in keys & set(fields):
        value, default = node[key], getattr(instance, key)
        if dataclasses.is_dataclass(default):
            _compare(value, default, f"{prefix}.{key}", problems)
        elif isinstance(value, str) and "${" in value:
            continue  # interpolated from another key
        elif value is None and fields[key].default is None:
            continue  # null in both: derived in __post_init__ (e.g. tokenizer_path from path)
        elif value != (list(default) if isinstance(default, tuple) else default):
            problems.append(f"{prefix}.{key}: yaml {value!r} != dataclass {default!r}")


def test_yaml_lists_every_field_with_the_dataclass_default(defaults):
    raw = OmegaConf.to_container(defaults, resolve=False)
    problems = []
    for group in GROUPS:
        _compare(raw[group], getattr(PPOConfig(), group), group, problems)
    assert problems == []
