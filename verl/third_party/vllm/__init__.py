"""vLLM version facts and lazy re-exports (verl's ``verl.third_party.vllm``).

- ``vllm_version``: the installed vLLM version string, or ``None`` when vLLM is not installed (verl raises at import
  in that case; here the module imports so that CPU machines can load recipes).
- ``VLLM_SLEEP_LEVEL``: the level this package's vLLM adapter passes to ``sleep`` (1: weights move to host memory
  and the KV cache is freed, so the next wake-up needs no weight reload).
- ``LLM``, ``parallel_state``: vLLM's own objects, imported on first access.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from verl.utils.extras import require_package, unavailable_class

__all__ = ["LLM", "VLLM_SLEEP_LEVEL", "get_version", "parallel_state", "vllm_version"]


def get_version(pkg: str) -> str | None:
    """Installed version of distribution ``pkg``, or ``None``."""
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


vllm_version: str | None = get_version("vllm")
VLLM_SLEEP_LEVEL = 1


def __getattr__(name: str) -> Any:
    if name == "LLM":
        if vllm_version is None:
            return unavailable_class("LLM", __name__, "the vLLM engine", package="vllm", extra="vllm")
        from vllm import LLM

        return LLM
    if name == "parallel_state":
        require_package("vllm", extra="vllm", what=f"{__name__}.parallel_state", feature="the vLLM engine")
        from vllm.distributed import parallel_state

        return parallel_state
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
