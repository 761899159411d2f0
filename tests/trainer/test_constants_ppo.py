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


def _run_python(code: str, pythonpath: str | None = None) -> str:
    import subprocess
    import sys

    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_the_driver_builds_the_ray_runtime_env_without_importing_torch():
    """``main_ppo``'s driver only starts Ray and the task runner: importing torch there cost seconds per launch."""
    printed = _run_python(
        "import sys\n"
        "from omegaconf import OmegaConf\n"
        "from verl.trainer.ppo.task_runner import _ray_init_kwargs\n"
        "kwargs = _ray_init_kwargs(OmegaConf.create({'ray_kwargs': {'ray_init': {'num_cpus': 2}}}))\n"
        "print(kwargs['num_cpus'], 'torch' in sys.modules)\n"
    )
    assert printed == "2 False"


def test_a_rocm_build_of_torch_is_recognised_from_its_version_file(tmp_path):
    """A ROCm torch (its ``version.py`` names a HIP version) gets Ray's zero-GPU override, read without importing
    torch: the package here raises on import, so reading the file is the only way to the answer."""
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('the driver must not import torch')\n")
    (package / "version.py").write_text("from typing import Optional\n__version__ = '2.9.0+rocm6.4'\nhip = '6.4'\n")
    printed = _run_python(
        "from verl.trainer.constants_ppo import get_ppo_ray_runtime_env\n"
        "print(get_ppo_ray_runtime_env()['env_vars'].get('RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO'))\n",
        pythonpath=str(tmp_path),
    )
    assert printed == "0"
    with patch.dict(os.environ, {}, clear=True):
        assert "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO" not in get_ppo_ray_runtime_env()["env_vars"]  # this CPU build
