"""verl's Megatron/TorchTitan configs, TrainingWorkerConfig, the reward-model data hooks and build_optimizer."""

from __future__ import annotations

import warnings

import pytest
import torch

from verl.base_config import ConfigError
from verl.utils.extras import MissingExtraError
from verl.workers.config import (
    DistillationConfig,
    DistillationLossConfig,
    FSDPEngineConfig,
    HFModelConfig,
    McoreActorConfig,
    McoreCriticConfig,
    McoreEngineConfig,
    McoreOptimizerConfig,
    OptimizerConfig,
    RewardModelDataProcessorConfig,
    TorchtitanEngineConfig,
    TorchtitanOptimizerConfig,
    TrainingWorkerConfig,
)
from verl.workers.config.optimizer import build_optimizer
from verl.workers.engine import EngineRegistry


def test_distillation_configs_are_the_trainer_ones():
    from verl.trainer.distillation import config as distillation
    from verl.workers.config.distillation import DistillationConfig as ByModulePath

    assert DistillationConfig is distillation.DistillationConfig is ByModulePath
    assert DistillationLossConfig is distillation.DistillationLossConfig
    assert DistillationConfig(distillation_loss={"loss_mode": "k1"}).distillation_loss.loss_mode == "k1"


def test_megatron_engine_keeps_verl_defaults_and_turns_off_sequence_parallel_without_tp():
    with pytest.warns(UserWarning, match="sequence_parallel is set to false"):
        single = McoreEngineConfig()
    assert (single.strategy, single.sequence_parallel, single.use_distributed_optimizer) == ("megatron", False, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sharded = McoreEngineConfig(tensor_model_parallel_size=4, pipeline_model_parallel_size=2)
    assert sharded.sequence_parallel is True and sharded["pipeline_model_parallel_size"] == 2


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"dtype": "float32"}, "dtype"),
        ({"strategy": "fsdp"}, "strategy"),
        ({"dynamic_context_parallel": True}, "max_seqlen_per_dp_cp_rank"),
        ({"router_replay": {"mode": "record"}}, "router_replay.mode"),
        ({"context_parallel_size": 0}, "context_parallel_size"),
    ],
)
def test_megatron_engine_names_the_bad_key(kwargs, key):
    with pytest.raises(ConfigError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        McoreEngineConfig(tensor_model_parallel_size=2, **kwargs)
    assert info.value.key == key


def test_megatron_actor_and_critic_build_their_engine_block_from_a_mapping():
    actor = McoreActorConfig(megatron={"tensor_model_parallel_size": 2}, ppo_mini_batch_size=8)
    assert isinstance(actor.megatron, McoreEngineConfig) and actor.megatron.tensor_model_parallel_size == 2
    assert actor.engine is actor.megatron and actor.clip_ratio_low == actor.clip_ratio
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        critic = McoreCriticConfig()
    assert critic.strategy == "megatron" and critic.nccl_timeout == 600 and critic.engine is critic.megatron
    with pytest.raises(ConfigError, match="strategy"):
        McoreActorConfig(strategy="fsdp", megatron={"tensor_model_parallel_size": 2})


def test_backend_optimizer_configs_validate_their_own_keys():
    assert McoreOptimizerConfig(lr=3e-4).optimizer == "adam"
    with pytest.raises(ConfigError, match="exp_avg_dtype"):
        McoreOptimizerConfig(exp_avg_dtype="fp8")
    titan = TorchtitanOptimizerConfig(decay_type="cosine", min_lr_factor=0.1)
    assert (titan.name, titan.eps) == ("AdamW", 1e-8)
    with pytest.raises(ConfigError, match="decay_type"):
        TorchtitanOptimizerConfig(decay_type="step")


def test_torchtitan_engine_checks_its_choices():
    config = TorchtitanEngineConfig(tensor_parallel_size=2, attn_type="varlen")
    assert config.strategy == "torchtitan" and config.activation_checkpoint == "selective"
    with pytest.raises(ConfigError, match="attn_type"):
        TorchtitanEngineConfig(attn_type="sdpa")


def test_engines_for_these_configs_are_refused_by_name():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        megatron = McoreEngineConfig()
    for engine_config in (megatron, TorchtitanEngineConfig()):
        with pytest.raises(MissingExtraError, match="not part of this build"):
            EngineRegistry.new(
                "language_model", engine_config.strategy, HFModelConfig(), engine_config, OptimizerConfig(), None
            )


def test_training_worker_config_carries_the_engine_choice():
    def select(model_config, device):
        return FSDPEngineConfig(strategy="fsdp2"), OptimizerConfig(lr=1e-5)

    config = TrainingWorkerConfig(
        model_type="value_model",
        model_config=HFModelConfig(),
        auto_select_engine_optim_fn=select,
        extra_context={"tag": 1},
    )
    engine, optim = config.auto_select_engine_optim_fn(config.model_config, "cpu")
    assert engine.strategy == "fsdp2" and optim.lr == 1e-5 and config["extra_context"] == {"tag": 1}
    with pytest.raises(ConfigError, match="model_type"):
        TrainingWorkerConfig(model_type="reward_model")
    with pytest.raises(ConfigError, match="auto_select_engine_optim_fn"):
        TrainingWorkerConfig(auto_select_engine_optim_fn="fsdp")


def test_reward_model_data_processor_loads_the_named_hooks(tmp_path):
    hooks = tmp_path / "rm_hooks.py"
    hooks.write_text("def pre(batch):\n    return ['pre', batch]\n\nNOT_A_FUNCTION = 3\n")
    pre, post = RewardModelDataProcessorConfig(path=str(hooks), preprocess_fn_name="pre").get_process_fn()
    assert pre("x") == ["pre", "x"] and post is None
    assert RewardModelDataProcessorConfig().get_process_fn() == (None, None)
    with pytest.raises(AttributeError, match="'post' not found"):
        RewardModelDataProcessorConfig(path=str(hooks), postprocess_fn_name="post").get_process_fn()
    with pytest.raises(TypeError, match="NOT_A_FUNCTION"):
        RewardModelDataProcessorConfig(path=str(hooks), postprocess_fn_name="NOT_A_FUNCTION").get_process_fn()
    with pytest.raises(ConfigError, match="path"):
        RewardModelDataProcessorConfig(preprocess_fn_name="pre")


def test_build_optimizer_is_adamw_over_trainable_parameters():
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    optimizer = build_optimizer(model.parameters(), OptimizerConfig(lr=0.01, weight_decay=0.1, betas=(0.8, 0.9)))
    assert isinstance(optimizer, torch.optim.AdamW)
    group = optimizer.param_groups[0]
    assert group["params"] == [model.weight] and group["lr"] == 0.01 and group["betas"] == (0.8, 0.9)
