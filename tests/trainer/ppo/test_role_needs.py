"""``need_critic`` / ``need_reference_policy`` (verl's helpers over any config shape) follow ``PPOConfig``'s rule."""

import pytest
from omegaconf import OmegaConf

from verl.trainer.config import AlgoConfig, PPOConfig
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.workers.config import FSDPActorConfig, FSDPCriticConfig


@pytest.mark.parametrize("enable", [None, True, False])
@pytest.mark.parametrize("estimator", ["gae", "grpo"])
def test_need_critic_is_the_typed_config_s_rule_in_every_spelling(enable, estimator):
    typed = PPOConfig(critic=FSDPCriticConfig(enable=enable), algorithm=AlgoConfig(adv_estimator=estimator))
    flat = OmegaConf.create({"critic": {"enable": enable}, "algorithm": {"adv_estimator": estimator}})
    as_enum = {"critic": {"enable": enable}, "algorithm": {"adv_estimator": AdvantageEstimator(estimator)}}
    assert need_critic(typed) == need_critic(flat) == need_critic(as_enum) == typed.use_critic
    assert typed.use_critic == (enable if enable is not None else estimator == "gae")


@pytest.mark.parametrize(("kl_loss", "kl_in_reward"), [(False, False), (True, False), (False, True)])
def test_need_reference_policy_follows_the_kl_terms_in_verl_s_nested_spelling_too(kl_loss, kl_in_reward):
    typed = PPOConfig(actor=FSDPActorConfig(use_kl_loss=kl_loss), algorithm=AlgoConfig(use_kl_in_reward=kl_in_reward))
    nested = {"actor_rollout_ref": {"actor": {"use_kl_loss": kl_loss}}, "algorithm": {"use_kl_in_reward": kl_in_reward}}
    assert need_reference_policy(typed) == need_reference_policy(nested) == typed.use_reference_policy
    assert typed.use_reference_policy == (kl_loss or kl_in_reward)
