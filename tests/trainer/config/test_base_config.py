"""BaseConfig: frozen dataclass with a read-only Mapping view."""

import dataclasses

import pytest

from verl.base_config import BaseConfig, ConfigError, check
from verl.workers.config import FSDPActorConfig, OptimizerConfig, RolloutConfig


def test_reads_like_a_mapping():
    cfg = OptimizerConfig(lr=3e-4)
    assert cfg["lr"] == 3e-4
    assert cfg.get("lr") == 3e-4
    assert cfg.get("missing", "fallback") == "fallback"
    assert "weight_decay" in cfg and "missing" not in cfg
    assert list(cfg) == [f.name for f in dataclasses.fields(OptimizerConfig) if not f.name.startswith("_")]
    assert len(cfg) == len([f for f in dataclasses.fields(OptimizerConfig) if not f.name.startswith("_")])
    assert dict(cfg)["lr_scheduler_type"] == "constant"
    assert {**cfg}["lr"] == 3e-4
    with pytest.raises(KeyError, match="OptimizerConfig has no field 'lrr'"):
        cfg["lrr"]


def test_mapping_view_hides_private_names():
    assert "_target_" not in RolloutConfig()
    assert RolloutConfig._target_ == "verl.workers.config.rollout.RolloutConfig"


def test_is_frozen_after_construction():
    cfg = RolloutConfig()
    with pytest.raises(dataclasses.FrozenInstanceError, match="RolloutConfig.temperature is frozen"):
        cfg.temperature = 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        del cfg.n
    assert dataclasses.replace(cfg, temperature=0.5).temperature == 0.5


def test_declared_mutable_fields_may_be_normalised():
    actor = FSDPActorConfig(ppo_mini_batch_size=16, rollout_n=4)
    actor.ppo_mini_batch_size = actor.ppo_mini_batch_size * actor.rollout_n // 2  # as a worker does per rank
    assert actor.ppo_mini_batch_size == 32
    with pytest.raises(dataclasses.FrozenInstanceError):
        actor.clip_ratio = 0.3


def test_to_dict_is_plain_and_nested():
    d = FSDPActorConfig().to_dict()
    assert isinstance(d["optim"], dict) and d["optim"]["lr"] == 1e-6
    assert isinstance(d["fsdp_config"], dict)
    assert d["clip_ratio_low"] == 0.2


def test_derived_defaults_fill_once_and_respect_explicit_values():
    actor = FSDPActorConfig(clip_ratio=0.3, clip_ratio_high=0.28)
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.3, 0.28)
    again = dataclasses.replace(actor, clip_ratio=0.1)  # derived values are now explicit and kept
    assert again.clip_ratio_low == 0.3


def test_check_raises_config_error_with_key():
    with pytest.raises(ConfigError, match="^foo: must be positive$") as info:
        check(False, "foo", "must be positive")
    assert info.value.key == "foo"


def test_subclass_gets_target_automatically():
    @dataclasses.dataclass
    class Local(BaseConfig):
        x: int = 1

    assert Local._target_.endswith("Local")
    assert Local(x=2)["x"] == 2
