"""Pieces shared by the adapters that wrap external engines (vLLM, SGLang) behind the rollout contract."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verl.workers.rollout.registry import require_package

if TYPE_CHECKING:
    from verl.workers.config import RolloutConfig

__all__ = [
    "PauseGate",
    "engine_args_with_overrides",
    "engine_kwargs_for",
    "finish_reason_to_stop_reason",
    "require_engine",
]


def require_engine(package: str, name: str) -> None:
    """Fail early and clearly when an optional engine cannot run here (package missing or no GPU)."""
    require_package(package, package, name)
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"rollout.name={name!r} needs a CUDA GPU and none is visible; use rollout.name=hf on CPU machines"
        )


def engine_kwargs_for(config: RolloutConfig, name: str) -> dict[str, Any]:
    """Extra engine arguments from ``rollout.engine_kwargs.<name>`` (verl's layout), or none."""
    chosen = config.engine_kwargs.get(name) or {}
    return {k: v for k, v in dict(chosen).items() if v is not None}


def engine_args_with_overrides(
    config: RolloutConfig, name: str, args: dict[str, Any], engine_kwargs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``args`` (an engine's arguments mapped from verl's rollout keys) under ``rollout.engine_kwargs.<name>`` and
    then the caller's ``engine_kwargs``: the user's explicit engine settings win."""
    return {**args, **engine_kwargs_for(config, name), **dict(engine_kwargs or {})}


def finish_reason_to_stop_reason(reason: Any) -> str:
    """Map an engine's finish reason ('stop', 'length', 'abort', dicts with a 'type') to the contract's."""
    if isinstance(reason, dict):
        reason = reason.get("type")
    reason = str(reason or "").lower()
    if reason.startswith("abort"):
        return "aborted"
    if reason == "length":
        return "length"
    return "stop"


class PauseGate:
    """Admission gate: closed by abort_all/sleep, opened by resume/wake_up; waiters time out by name."""

    def __init__(self, timeout_s: float = 600.0):
        self.timeout_s = timeout_s
        self.paused = False
        self.sleeping = False
        self._event: asyncio.Event | None = None

    def _get(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
            self._refresh()
        return self._event

    def _refresh(self) -> None:
        event = self._get()
        if self.paused or self.sleeping:
            event.clear()
        else:
            event.set()

    def set(self, *, paused: bool | None = None, sleeping: bool | None = None) -> None:
        if paused is not None:
            self.paused = paused
        if sleeping is not None:
            self.sleeping = sleeping
        self._refresh()

    async def wait(self, request_id: str) -> None:
        event = self._get()
        if event.is_set():
            return
        try:
            await asyncio.wait_for(event.wait(), timeout=self.timeout_s)
        except asyncio.TimeoutError:
            state = "asleep" if self.sleeping else "paused"
            raise TimeoutError(
                f"request {request_id}: the rollout server stayed {state} for {self.timeout_s}s "
                "(abort_all/sleep without resume/wake_up)"
            ) from None
