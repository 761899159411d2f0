"""omega_conf_to_dataclass: nested building, plain containers, and errors naming the dotted key."""

import pytest
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config import AlgoConfig, TrainerConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import ActorConfig, FSDPActorConfig, OptimizerConfig, PolicyLossConfig, RolloutConfig


def test_builds_nested_dataclasses_and_plain_containers():
    node = OmegaConf.create(
        {
            "ppo_mini_batch_size": 4,
            "optim": {"lr": 1e-3, "betas": [0.8, 0.9]},
            "policy_loss": {"loss_mode": "gspo"},
            "checkpoint": {"save_contents": ["model"]},
        }
    )
    actor = omega_conf_to_dataclass(node, FSDPActorConfig)
    assert isinstance(actor.optim, OptimizerConfig) and actor.optim.lr == 1e-3
    assert actor.optim.betas == (0.8, 0.9)
    assert isinstance(actor.policy_loss, PolicyLossConfig) and actor.policy_loss.loss_mode == "gspo"
    assert type(actor.checkpoint.save_contents) is list


def test_target_selects_the_class_and_must_match_the_requested_type():
    node = OmegaConf.create({"_target_": "verl.workers.config.FSDPActorConfig", "ppo_epochs": 2})
    actor = omega_conf_to_dataclass(node, ActorConfig)
    assert type(actor) is FSDPActorConfig and actor.ppo_epochs == 2
    assert type(omega_conf_to_dataclass(node)) is FSDPActorConfig
    with pytest.raises(
        ConfigError,
        match="actor._target_: verl.workers.config.FSDPActorConfig is not a subclass of the expected RolloutConfig",
    ):
        omega_conf_to_dataclass(node, RolloutConfig, path="actor")


def test_unknown_key_is_named_with_a_suggestion():
    node = OmegaConf.create({"ppo_epoch": 2})
    with pytest.raises(
        ConfigError,
        match=r"^actor.ppo_epoch: unknown key for FSDPActorConfig \(did you mean "
        r"'ppo_epochs'\?\)",
    ):
        omega_conf_to_dataclass(node, FSDPActorConfig, path="actor")


def test_nested_unknown_key_has_the_full_path():
    node = OmegaConf.create({"optim": {"learning_rate": 1.0}})
    with pytest.raises(ConfigError, match="^actor.optim.learning_rate: unknown key for OptimizerConfig"):
        omega_conf_to_dataclass(node, FSDPActorConfig, path="actor")


@pytest.mark.parametrize(
    "node, message",
    [
        ({"ppo_epochs": "abc"}, "actor.ppo_epochs: expected int, got 'abc' (str)"),
        ({"ppo_epochs": True}, "actor.ppo_epochs: expected int, got True (bool)"),
        ({"use_kl_loss": "yes"}, "actor.use_kl_loss: expected bool, got 'yes' (str)"),
        ({"optim": {"betas": [0.9, "x"]}}, "actor.optim.betas[1]: expected float, got 'x' (str)"),
        ({"optim": 3}, "actor.optim: expected a mapping for OptimizerConfig, got 3 (int)"),
        ({"ppo_micro_batch_size_per_gpu": 1.5}, "actor.ppo_micro_batch_size_per_gpu: expected int | None, got 1.5"),
    ],
)
def test_wrong_types_name_the_key(node, message):
    with pytest.raises(ConfigError) as info:
        omega_conf_to_dataclass(OmegaConf.create(node), FSDPActorConfig, path="actor")
    assert str(info.value).startswith(message)


def test_int_is_accepted_for_float_fields():
    algo = omega_conf_to_dataclass({"gamma": 1, "lam": 0}, AlgoConfig)
    assert isinstance(algo.gamma, float) and algo.lam == 0.0


def test_validation_errors_get_the_path_prefix():
    with pytest.raises(ConfigError, match="^trainer.device: must be one of"):
        omega_conf_to_dataclass({"device": "tpu"}, TrainerConfig, path="trainer")


def test_an_instance_is_returned_unchanged():
    cfg = OptimizerConfig()
    assert omega_conf_to_dataclass(cfg, OptimizerConfig) is cfg


def test_node_without_target_needs_a_type():
    with pytest.raises(ConfigError, match="no dataclass_type given and the node has no _target_"):
        omega_conf_to_dataclass(OmegaConf.create({"lr": 1.0}))


def test_a_sub_node_names_keys_by_its_position_in_the_whole_config():
    cfg = OmegaConf.create({"actor": {"optim": {"lr": "fast"}}})
    with pytest.raises(ConfigError, match=r"^actor.optim.lr: expected float, got 'fast' \(str\)"):
        omega_conf_to_dataclass(cfg.actor, FSDPActorConfig)
