"""verl 0.9.1's config keys: accepted in both spellings, on the command line and in YAML; inert ones named once;
values this build cannot honour refused by key."""

from __future__ import annotations

import textwrap
import warnings

import pytest
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config import build_ppo_config
from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.config.inert_keys import InertConfigWarning, check_inert_keys, interpolated_keys
from verl.trainer.main_ppo import resolve_config

# (verl's nested spelling, the flattened key, a value that is not the default) for keys verl 0.9.1 added or keeps
VERL_KEYS = [
    ("actor_rollout_ref.rollout.enable_chunked_prefill", "rollout.enable_chunked_prefill", False),
    ("actor_rollout_ref.rollout.load_format", "rollout.load_format", "safetensors"),
    ("actor_rollout_ref.rollout.multi_stage_wake_up", "rollout.multi_stage_wake_up", True),
    ("actor_rollout_ref.rollout.over_sample_rate", "rollout.over_sample_rate", 0.1),
    ("actor_rollout_ref.rollout.trace.token2text", "rollout.trace.token2text", True),
    ("actor_rollout_ref.rollout.engine_kwargs.vllm.max_loras", "rollout.engine_kwargs.vllm.max_loras", 2),
    ("actor_rollout_ref.actor.profiler.enable", "actor.profiler.enable", True),
    (
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active",
        "actor.profiler.tool_config.torch.schedule.active",
        3,
    ),
    ("actor_rollout_ref.actor.fsdp_config.use_orig_params", "actor.fsdp_config.use_orig_params", True),
    ("actor_rollout_ref.actor.fsdp_config.qat.enable", "actor.fsdp_config.qat.enable", True),
    ("actor_rollout_ref.actor.optim.zero_indexed_step", "actor.optim.zero_indexed_step", False),
    ("actor_rollout_ref.actor.tau_pos", "actor.tau_pos", 2.0),
    ("actor_rollout_ref.actor.loss_scale_factor", "actor.loss_scale_factor", 512.0),
    ("actor_rollout_ref.actor.checkpoint.strict", "actor.checkpoint.strict", False),
    ("actor_rollout_ref.ref.profiler.enable", "ref.profiler.enable", True),
    ("actor_rollout_ref.model.tiled_mlp.enabled", "model.tiled_mlp.enabled", True),
    ("actor_rollout_ref.model.mtp.enable", "model.mtp.enable", True),
    ("actor_rollout_ref.model.lora.rank", "model.lora.rank", 8),
    ("actor_rollout_ref.model.fused_kernel_options.impl_backend", "model.fused_kernel_options.impl_backend", "triton"),
    ("critic.model.fsdp_config.param_offload", "critic.fsdp_config.param_offload", True),
    ("critic.fsdp.forward_prefetch", "critic.fsdp_config.forward_prefetch", True),
    ("critic.profiler.enable", "critic.profiler.enable", True),
    ("reward_model.rollout.gpu_memory_utilization", "reward.reward_model.rollout.gpu_memory_utilization", 0.7),
    ("sandbox_fusion.url", "reward.sandbox_fusion.url", "http://sandbox"),
    ("algorithm.filter_groups.enable", "algorithm.filter_groups.enable", True),
    ("algorithm.rollout_correction.loss_type", "algorithm.rollout_correction.loss_type", "reinforce"),
    ("trainer.use_legacy_worker_impl", "trainer.use_legacy_worker_impl", "disable"),
    ("trainer.v1.trainer_mode", "trainer.v1.trainer_mode", "separate_async"),
    ("global_profiler.tool", "global_profiler.tool", "torch"),
    ("transfer_queue.enable", "transfer_queue.enable", True),
    ("data.train_max_samples", "data.train_max_samples", 100),
]


def _select(cfg, key):
    return OmegaConf.select(cfg, key, throw_on_missing=True)


@pytest.mark.parametrize("spelling", ["verl", "flattened", "plus"])
def test_verl_keys_are_accepted_in_both_spellings(spelling):
    overrides = {
        "verl": [f"{verl_key}={value}" for verl_key, _, value in VERL_KEYS],
        "flattened": [f"{key}={value}" for _, key, value in VERL_KEYS],
        "plus": [f"+{verl_key}={value}" for verl_key, _, value in VERL_KEYS],  # verl's scripts add "+" at times
    }[spelling]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = compose_ppo_config(overrides)
        build_ppo_config(cfg)
    assert {key: _select(cfg, key) for _, key, _ in VERL_KEYS} == {key: value for _, key, value in VERL_KEYS}


def test_verl_keys_in_a_user_yaml(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        textwrap.dedent("""
        defaults:
          - ppo_trainer
          - _self_
        actor_rollout_ref:
          actor:
            optim:
              _target_: verl.workers.config.FSDPOptimizerConfig
              warmup_style: cosine
            checkpoint:
              _target_: verl.trainer.config.CheckpointConfig
            profiler:
              _target_: verl.utils.profiler.ProfilerConfig
              enable: true
          rollout:
            enable_chunked_prefill: false
            checkpoint_engine:
              update_weights_bucket_megabytes: 1024
          hybrid_engine: true
        critic:
          fsdp:
            param_offload: true
        reward:
          reward_manager:
            _target_: verl.workers.config.reward.RewardManagerConfig
            source: register
            name: dapo
            module:
              path: null
              name: custom_reward_manager
          reward_model:
            model_path: /models/rm
        reward_model:
          num_workers: null
          enable: null
        custom_reward_function:
          path: /tmp/score.py
          name: null
        """)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = compose_ppo_config(config_name="mine", config_dir=str(tmp_path))
        typed = build_ppo_config(cfg)
    assert typed.actor.optim.lr_scheduler_type == "cosine"  # verl's older name, honoured
    assert typed.rollout.enable_chunked_prefill is False and typed.rollout.checkpoint_engine.bucket_megabytes == 1024
    assert typed.critic.fsdp_config.param_offload is True
    assert typed.reward.reward_manager == "dapo" and typed.reward.reward_model.model.path == "/models/rm"
    assert typed.reward.custom_reward_function.path == "/tmp/score.py"
    assert typed.reward.custom_reward_function.name == "compute_score"  # verl's null: the default function name
    assert typed.reward.num_workers == 1  # reward_model.num_workers: null means "not set"
    legacy = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert legacy == [
        "config block 'actor_rollout_ref.actor' (5 keys) is deprecated; its keys moved under 'actor' "
        "(translated automatically)",
        "config block 'actor_rollout_ref.rollout' (2 keys) is deprecated; "
        "its keys moved under 'rollout' (translated automatically)",
    ]


def test_inert_block_leaves_are_named_once():
    typed = resolve_config(
        compose_ppo_config(
            [
                "actor.profiler.enable=true",
                "rollout.trace.backend=weave",
                "trainer.v1.trainer_mode=separate_async",
                "actor.tau_pos=2.0",
            ]
        )
    )[1]
    with pytest.warns(InertConfigWarning):
        messages = check_inert_keys(typed)
    assert [m.split(" has")[0] for m in messages] == [
        "config: actor.profiler.enable=True",
        "config: rollout.trace.backend='weave'",
        "config: trainer.v1.trainer_mode='separate_async'",
    ]  # tau_pos acts (loss_mode=sapo)
    assert "no profiler is wired into this build" in messages[0]


def test_keys_derived_by_interpolation_are_not_reported():
    cfg = compose_ppo_config(["actor.ulysses_sequence_parallel_size=2"])
    derived = interpolated_keys(cfg)
    assert "ref.ulysses_sequence_parallel_size" in derived and "actor.ulysses_sequence_parallel_size" not in derived
    typed = resolve_config(cfg)[1]
    with pytest.warns(InertConfigWarning):
        messages = check_inert_keys(typed, skip=derived)
    assert [m.split("=")[0] for m in messages] == ["config: actor.ulysses_sequence_parallel_size"]


def test_global_micro_batch_sizes_become_per_process_sizes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = compose_ppo_config(
            [
                "trainer.n_gpus_per_node=4",
                "data.train_batch_size=64",
                "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                "actor_rollout_ref.actor.ppo_micro_batch_size=8",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size=32",
                "actor_rollout_ref.ref.log_prob_micro_batch_size=16",
                "critic.forward_micro_batch_size=4",
            ]
        )
    typed = build_ppo_config(cfg)
    assert typed.actor.ppo_micro_batch_size is None and typed.actor.ppo_micro_batch_size_per_gpu == 2
    assert typed.actor.log_prob_micro_batch_size_per_gpu == 8 and typed.ref.log_prob_micro_batch_size_per_gpu == 4
    assert typed.critic.forward_micro_batch_size_per_gpu == 1
    with pytest.raises(ConfigError, match=r"^actor.log_prob_micro_batch_size: set only one of"):
        compose_ppo_config(["actor.log_prob_micro_batch_size=32", "actor.log_prob_micro_batch_size_per_gpu=4"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor.optim.optimizer_impl=bitsandbytes.optim", r"^actor.optim.optimizer_impl: 'bitsandbytes.optim' is not"),
        (
            "rollout.checkpoint_engine.custom_backend_module=my.mod",
            r"^rollout.checkpoint_engine.custom_backend_module: ",
        ),
        ("actor.fsdp_config.strategy=megatron", r"^actor.fsdp_config.strategy: 'megatron' selects verl's Megatron-LM"),
        ("model_engine=torchtitan", r"^model_engine: 'torchtitan' selects verl's TorchTitan engine"),
        ("algorithm.rollout_correction.loss_type=pg", r"^algorithm.rollout_correction.loss_type: must be one of"),
    ],
)
def test_values_this_build_cannot_honour_are_refused_by_key(override, message):
    with pytest.raises(ConfigError, match=message):
        build_ppo_config(compose_ppo_config([override]))
