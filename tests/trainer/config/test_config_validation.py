"""__post_init__ validation: each bad value fails with a message naming its key."""

import pytest

from verl.base_config import ConfigError
from verl.trainer.config import AlgoConfig, AsyncTrainingConfig, DataConfig, RolloutCorrectionConfig, TrainerConfig
from verl.workers.config import (
    CheckpointConfig,
    FSDPActorConfig,
    FSDPCriticConfig,
    OptimizerConfig,
    RewardConfig,
    RewardModelConfig,
    RolloutConfig,
)


@pytest.mark.parametrize(
    "factory, message",
    [
        (lambda: FSDPActorConfig(clip_ratio_c=1.0), "clip_ratio_c: must be > 1"),
        (lambda: FSDPActorConfig(loss_agg_mode="mean"), "loss_agg_mode: must be one of ['token-mean'"),
        (lambda: FSDPActorConfig(kl_loss_type="k9"), "kl_loss_type: must be one of"),
        (lambda: FSDPActorConfig(ppo_epochs=0), "ppo_epochs: must be >= 1, got 0"),
        (
            lambda: FSDPActorConfig(strategy="megatron"),
            "strategy: 'megatron' selects verl's Megatron-LM engine, which this build does not include; use fsdp or",
        ),
        (lambda: FSDPCriticConfig(strategy="torchtitan"), "strategy: 'torchtitan' selects verl's TorchTitan engine"),
        (lambda: FSDPActorConfig(strategy="ddp"), "strategy: 'ddp' is not a training backend; use fsdp or fsdp2"),
        (
            lambda: FSDPActorConfig(ppo_micro_batch_size=8, ppo_micro_batch_size_per_gpu=2),
            "ppo_micro_batch_size: set only one of",
        ),
        (lambda: FSDPCriticConfig(loss_agg_mode="x"), "loss_agg_mode: must be one of"),
        (lambda: CheckpointConfig(save_contents=["model", "weights"]), "save_contents: unknown entries ['weights']"),
        (lambda: OptimizerConfig(lr_scheduler_type="linear"), "lr_scheduler_type: must be one of ['constant', 'cos"),
        (lambda: RolloutConfig(top_p=0.0), "top_p: must be in (0, 1], got 0.0"),
        (lambda: RolloutConfig(nnodes=-1), "nnodes: must be >= 0 (0 = share the actor's processes), got -1"),
        (lambda: RolloutConfig(dtype="int8"), "dtype: must be one of"),
        (lambda: RolloutConfig(max_num_batched_tokens=0), "max_num_batched_tokens: must be >= 1, got 0"),
        (lambda: RewardModelConfig(enable=True), "model.path: must be set when the reward model is enabled"),
        (lambda: RewardConfig(timeout_s=0), "timeout_s: must be > 0"),
        (lambda: AlgoConfig(gamma=1.5), "gamma: must be in [0, 1], got 1.5"),
        (lambda: AlgoConfig(kl_penalty="nope"), "kl_penalty: must be one of"),
        (lambda: RolloutCorrectionConfig(rollout_rs="token"), "rollout_rs_threshold: must be set when rollout_rs"),
        (lambda: TrainerConfig(logger=["console", "neptune"]), "logger: unknown logger(s) ['neptune']"),
        (lambda: TrainerConfig(resume_mode="resume_path"), "resume_from_path: must be set when resume_mode"),
        (lambda: DataConfig(truncation="cut"), "truncation: must be one of ['error', 'left', 'right', 'middle']"),
        (lambda: DataConfig(train_batch_size=0), "train_batch_size: must be >= 1, got 0"),
        (lambda: AsyncTrainingConfig(trigger_parameter_sync_step=0), "trigger_parameter_sync_step: must be >= 1"),
    ],
)
def test_bad_values_are_named(factory, message):
    with pytest.raises(ConfigError) as info:
        factory()
    assert str(info.value).startswith(message), str(info.value)


def test_good_edge_values_pass():
    assert FSDPActorConfig(clip_ratio_c=1.01, kl_loss_type="k1+").kl_loss_type == "k1+"
    assert RolloutCorrectionConfig(rollout_rs="token", rollout_rs_threshold=2.0).rollout_rs_threshold_lower == 0.5
    assert FSDPCriticConfig().is_enabled("gae") and not FSDPCriticConfig().is_enabled("grpo")
    assert FSDPCriticConfig(enable=True).is_enabled("grpo")
