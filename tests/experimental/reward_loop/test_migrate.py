"""migrate_legacy_reward_impl on verl's layout, this package's layout and typed configs."""

from omegaconf import OmegaConf

from verl.experimental.reward_loop import migrate_legacy_reward_impl
from verl.trainer.config.compose import compose_ppo_config
from verl.workers.config import RewardConfig


def verl_layout(**legacy_rm):
    """verl 0.9.1's shape: legacy top-level groups (all null) beside the reward group."""
    reward_model = {
        "num_workers": None,
        "reward_manager": None,
        "reward_loop_source": None,
        "reward_loop_module_path": None,
        "reward_loop_class_name": None,
        "enable": None,
        "enable_resource_pool": None,
        "n_gpus_per_node": None,
        "nnodes": None,
        "model": {"path": None},
        "rollout": {"name": None, "gpu_memory_utilization": None},
    }
    reward_model.update(legacy_rm)
    cfg = {
        "reward_model": reward_model,
        "custom_reward_function": {"path": None, "name": None},
        "sandbox_fusion": {"url": None, "max_concurrent": None},
        "reward": {
            "num_workers": 8,
            "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": None}},
            "custom_reward_function": {"path": None, "name": "compute_score"},
            "reward_model": {"enable": False, "model_path": None, "rollout": {"name": "vllm"}},
            "sandbox_fusion": {"url": None},
        },
    }
    config = OmegaConf.create(cfg)
    OmegaConf.set_struct(config, True)
    return config


def test_verl_layout_moves_set_keys_and_drops_legacy_groups():
    config = verl_layout(
        num_workers=2,
        reward_manager="dapo",
        enable=True,
        model={"path": "/rm"},
        reward_kwargs={"overlong_buffer_cfg": {"enable": True}},
        rollout={"name": "sglang", "gpu_memory_utilization": None},
        reward_loop_source="importlib",
        reward_loop_module_path="/x.py",
        reward_loop_class_name="Mine",
    )
    config.custom_reward_function.path = "/score.py"
    out = migrate_legacy_reward_impl(config)
    assert out is config
    assert not {"reward_model", "custom_reward_function", "sandbox_fusion"} & set(config)
    reward = config.reward
    assert reward.num_workers == 2 and reward.reward_kwargs.overlong_buffer_cfg.enable
    assert reward.reward_manager == {"source": "importlib", "name": "dapo", "module": {"path": "/x.py", "name": "Mine"}}
    assert reward.reward_model.enable and reward.reward_model.model_path == "/rm"
    assert reward.reward_model.rollout.name == "sglang"
    assert reward.custom_reward_function.path == "/score.py"
    assert reward.sandbox_fusion.url is None  # nothing was set in the legacy group


def test_unset_legacy_groups_change_nothing_but_are_removed():
    config = verl_layout()
    before = OmegaConf.to_container(config.reward)
    migrate_legacy_reward_impl(config)
    assert OmegaConf.to_container(config.reward) == before and "reward_model" not in config


def test_plain_name_layout_keeps_a_plain_name():
    config = {
        "reward_model": {"reward_manager": "batch", "model": {"path": "/rm"}},
        "reward": {"reward_manager": "naive", "reward_model": {"model": {"path": None}}},
    }
    migrate_legacy_reward_impl(config)
    assert config == {"reward": {"reward_manager": "batch", "reward_model": {"model": {"path": "/rm"}}}}


def test_translated_configs_are_returned_unchanged():
    composed = compose_ppo_config(["reward_model.reward_manager=dapo"])  # the config layer already moved it
    assert composed.reward.reward_manager == "dapo" and "reward_model" not in composed
    before = OmegaConf.to_container(composed)
    assert OmegaConf.to_container(migrate_legacy_reward_impl(composed)) == before
    typed = RewardConfig(reward_manager="batch")
    assert migrate_legacy_reward_impl(typed) is typed
