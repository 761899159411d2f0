"""The Ray runtime environment a PPO run gives its workers (``ray.init(runtime_env=get_ppo_ray_runtime_env(cfg))``).

Workers on other nodes do not inherit the driver's shell, so the variables they need travel in the runtime
environment. A variable already set in the launching shell is left out of our defaults (workers on the
driver's node inherit the shell's value, and an explicit choice should win); determinism switches and our own
folders (``VERL_CACHE_DIR``, ``VERL_SHM_DIR``, ``TENSORBOARD_DIR``) are forwarded from the shell when set.

Profiling with the torch profiler: an image-level ``NVTX_INJECTION64_PATH`` (often pointing at libcupti)
takes the CUPTI subscription Kineto needs, and the traces lose every GPU kernel. With
``global_profiler.tool=torch`` the workers get a path that loads nothing instead; ``VERL_KEEP_NVTX_INJECTION=1``
keeps the inherited value.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["NVTX_INJECTION_ENV", "PPO_RAY_RUNTIME_ENV", "get_ppo_ray_runtime_env"]

logger = logging.getLogger(__name__)

NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"
# Non-empty on purpose: a startup hook that does os.environ.setdefault() cannot put libcupti back.
_NVTX_INJECTION_DISABLED = "/nonexistent/verl-nvtx-injection-disabled.so"
_KEEP_NVTX_INJECTION_ENV = "VERL_KEEP_NVTX_INJECTION"

PPO_RAY_RUNTIME_ENV: dict[str, dict[str, str]] = {
    "env_vars": {
        # Tokenizers are used from many Ray workers at once; their own thread pools would oversubscribe the CPUs.
        "TOKENIZERS_PARALLELISM": "false",
        "NCCL_DEBUG": "WARN",
    },
}

_FORWARDED_WHEN_SET = (
    "VERL_CACHE_DIR",
    "VERL_SHM_DIR",
    "TENSORBOARD_DIR",
    "VERL_FULL_DETERMINISM",
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "FLASH_ATTENTION_DETERMINISTIC",
    "NCCL_DETERMINISTIC",
    "NCCL_ALGO",
)


def _profiler_tool(config: Any) -> str | None:
    """``global_profiler.tool`` of a DictConfig, dict or :class:`~verl.trainer.config.PPOConfig` (the block is verl's
    free-form one: no dataclass declares it)."""
    if config is None or "global_profiler" not in config:
        return None
    profiler = config["global_profiler"]
    return profiler["tool"] if profiler is not None and "tool" in profiler else None


def _torch_is_rocm_build() -> bool:
    """Whether the installed torch is a ROCm build, without importing torch (seconds of CPU the driver, which never
    runs torch itself, need not pay): the build's ``torch/version.py`` is plain assignments, read on its own."""
    import sys

    if "torch" in sys.modules:
        return sys.modules["torch"].version.hip is not None
    import importlib.util

    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        version_file = os.path.join(location, "version.py")
        if os.path.isfile(version_file):
            build: dict[str, Any] = {}
            with open(version_file) as source:
                exec(compile(source.read(), version_file, "exec"), build)
            return build.get("hip") is not None
    return False


def _rocm_env() -> dict[str, str]:
    # On ROCm, Ray would otherwise clear HIP_VISIBLE_DEVICES for actors that ask for zero GPUs.
    return {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"} if _torch_is_rocm_build() else {}


def get_ppo_ray_runtime_env(config: Any = None) -> dict[str, Any]:
    """``{"env_vars": {...}}`` for ``ray.init`` (see the module docstring); ``config`` is the run's config."""
    defaults = {**PPO_RAY_RUNTIME_ENV["env_vars"], **_rocm_env()}
    env_vars = {key: value for key, value in defaults.items() if os.environ.get(key) is None}
    for key in _FORWARDED_WHEN_SET:
        if os.environ.get(key) is not None:
            env_vars[key] = os.environ[key]
    if _profiler_tool(config) == "torch" and os.environ.get(_KEEP_NVTX_INJECTION_ENV, "0") != "1":
        # Set after the shell filter above: overriding an inherited value is the point.
        env_vars[NVTX_INJECTION_ENV] = _NVTX_INJECTION_DISABLED
        logger.warning(
            "global_profiler.tool=torch: workers get %s=%s (was %s) so the torch profiler records GPU kernels; "
            "set %s=1 to keep the inherited value",
            NVTX_INJECTION_ENV,
            _NVTX_INJECTION_DISABLED,
            os.environ.get(NVTX_INJECTION_ENV) or "unset",
            _KEEP_NVTX_INJECTION_ENV,
        )
    return {"env_vars": env_vars}
