"""The Ray runtime environment of a PPO run."""

from __future__ import annotations

import os
from unittest.mock import patch

from omegaconf import OmegaConf

from verl.trainer.constants_ppo import NVTX_INJECTION_ENV, get_ppo_ray_runtime_env


def test_defaults_yield_to_the_shell_and_our_folders_are_forwarded():
    with patch.dict(os.environ, {"NCCL_DEBUG": "INFO", "VERL_CACHE_DIR": "/data/cache"}, clear=True):
        env_vars = get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars["TOKENIZERS_PARALLELISM"] == "false"
    assert "NCCL_DEBUG" not in env_vars  # workers inherit the shell's INFO on this node
    assert env_vars["VERL_CACHE_DIR"] == "/data/cache"
    assert "PYTHONHASHSEED" not in env_vars


def test_torch_profiler_overrides_nvtx_injection_from_any_config_shape():
    for config in (OmegaConf.create({"global_profiler": {"tool": "torch"}}), {"global_profiler": {"tool": "torch"}}):
        with patch.dict(os.environ, {NVTX_INJECTION_ENV: "/opt/libcupti.so"}, clear=True):
            env_vars = get_ppo_ray_runtime_env(config)["env_vars"]
        assert env_vars[NVTX_INJECTION_ENV] not in ("", "/opt/libcupti.so")
    with patch.dict(os.environ, {}, clear=True):
        assert NVTX_INJECTION_ENV not in get_ppo_ray_runtime_env({"global_profiler": {"tool": None}})["env_vars"]
