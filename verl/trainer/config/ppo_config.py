"""PPOConfig: the whole resolved trainer config as one typed object, with the cross-group checks.

:func:`build_ppo_config` is the start-up gate that turns the composed DictConfig into typed groups, so that every bad
key or value fails before any process starts. It runs once per run (:mod:`verl.trainer.config.resolve` carries the
object on to the task runner and the trainer). The trainer keeps the DictConfig as ``self.config`` (verl's recipes
read it) but reads its own settings from this object, and this object, with the sizes only the trainer knows filled
in (:func:`with_total_training_steps`), is what every worker receives.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, cast

from omegaconf import DictConfig

from verl.base_config import BaseConfig, ConfigError, check
from verl.trainer.config.algo_config import AlgoConfig
from verl.trainer.config.async_config import AsyncTrainingConfig
from verl.trainer.config.batch_plan import _plan
from verl.trainer.config.data_config import DataConfig
from verl.trainer.config.trainer_config import TrainerConfig
from verl.utils.config_builder import omega_conf_to_dataclass
from verl.workers.config import (
    ActorConfig,
    CriticConfig,
    FSDPActorConfig,
    FSDPCriticConfig,
    HFModelConfig,
    RewardConfig,
    RolloutConfig,
)
from verl.workers.config.inert_blocks import inert_block

__all__ = ["GROUPS", "PPOConfig", "build_ppo_config", "with_total_training_steps"]

logger = logging.getLogger(__name__)

GROUPS = ("data", "model", "actor", "ref", "rollout", "critic", "reward", "algorithm", "trainer", "async_training")
# verl's `model_engine` config group picks the training engine; only its FSDP one ("dp") exists here.
_ENGINES = {
    "megatron": "verl's Megatron-LM engine",
    "torchtitan": "verl's TorchTitan engine",
    "veomni": "verl's VeOmni engine",
    "automodel": "verl's AutoModel engine",
}


@dataclass
class PPOConfig(BaseConfig):
    """All groups of ``ppo_trainer.yaml``; ``__post_init__`` checks what involves more than one group.

    ``model_engine`` is verl's engine switch (``dp`` = FSDP; others are refused by name). ``global_profiler``,
    ``distillation``, ``transfer_queue`` and ``skip`` are verl's top-level blocks: ``global_profiler.tool`` reaches
    the workers' environment, ``distillation.enabled`` is refused when the trainer starts, the last two have no
    effect (``inert_keys.py``)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: HFModelConfig = field(default_factory=HFModelConfig)
    actor: ActorConfig = field(default_factory=FSDPActorConfig)
    ref: ActorConfig = field(default_factory=FSDPActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    critic: CriticConfig = field(default_factory=FSDPCriticConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    ray_kwargs: dict[str, Any] = field(default_factory=dict)
    model_engine: str = "dp"
    global_profiler: dict[str, Any] = field(default_factory=lambda: inert_block("global_profiler"))
    distillation: dict[str, Any] = field(default_factory=lambda: inert_block("distillation"))
    transfer_queue: dict[str, Any] = field(default_factory=lambda: inert_block("transfer_queue"))
    skip: dict[str, Any] = field(default_factory=lambda: inert_block("skip"))

    def __post_init__(self) -> None:
        if self.model_engine != "dp":
            engine = _ENGINES.get(self.model_engine)
            detail = (
                f"{self.model_engine!r} selects {engine}, which this build does not include"
                if engine
                else (f"{self.model_engine!r} is not an engine of this build")
            )
            raise ConfigError(
                f"{detail}; the only engine is dp (FSDP/FSDP2, actor.strategy=fsdp|fsdp2)", key="model_engine"
            )
        for group in ("actor", "ref", "critic"):
            value = getattr(self, group).rollout_n
            check(
                value == self.rollout.n,
                f"{group}.rollout_n",
                f"({value}) must equal rollout.n ({self.rollout.n}); set rollout.n only",
            )
        check(
            self.rollout.prompt_length >= self.data.max_prompt_length,
            "rollout.prompt_length",
            f"({self.rollout.prompt_length}) must be >= data.max_prompt_length ({self.data.max_prompt_length})",
        )
        _plan(self)  # raises ConfigError for an impossible batch plan

    @property
    def use_critic(self) -> bool:
        # is_enabled reads any estimator but "gae" (None included) as "no critic"
        return self.critic.is_enabled(cast(str, self.algorithm.adv_estimator))

    @property
    def use_reference_policy(self) -> bool:
        return self.actor.use_kl_loss or self.algorithm.use_kl_in_reward


def build_ppo_config(cfg: DictConfig | dict) -> PPOConfig:
    """Resolve and validate a composed config; raises :class:`~verl.base_config.ConfigError` naming the key."""
    typed = omega_conf_to_dataclass(cfg, PPOConfig, keep_unknown=True)
    logger.debug("PPOConfig built")  # once per run: tests/trainer/test_config_built_once.py counts these lines
    return typed


def with_total_training_steps(config: PPOConfig, total_steps: int) -> PPOConfig:
    """``config`` with ``total_training_steps`` given to the actor's and the critic's optimizers where the user left
    it unset (verl's trainer injects it once the data size is known: cosine schedules and warm-up ratios need it).
    A new object: the configs are frozen."""
    groups = {}
    for name in ("actor", "critic"):
        group = getattr(config, name)
        if int(group.optim.total_training_steps or -1) <= 0:
            optim = dataclasses.replace(group.optim, total_training_steps=int(total_steps))
            groups[name] = dataclasses.replace(group, optim=optim)
    return dataclasses.replace(config, **groups) if groups else config
