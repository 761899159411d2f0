"""SkipManager: the process-wide switchboard that decorated stages consult (``@SkipManager.annotate(role)``).

Until :meth:`SkipManager.init` runs with a config whose ``skip.<role>.enable`` is true, decorated stages run
unchanged. Validation calls (``meta_info["validate"]``) always run: skipping is for training steps only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from verl.utils.config import omega_conf_to_dataclass
from verl.utils.skip.base_skip import SKIP_REGISTRY, BaseSkip
from verl.utils.skip.config import SkipManagerConfig

__all__ = ["SkipManager"]

# The trainer config's block read by SkipManager.init. This build's trainer does not call init (the block is listed
# as inert there); recipes that call it themselves get verl's behaviour.
_SKIP_BLOCK = "skip"


class SkipManager:
    """Class-level state: the ``skip`` config, the trainer's current step and one skip instance per role."""

    config: ClassVar[SkipManagerConfig | None] = None
    step: ClassVar[int] = -1
    skip_instances: ClassVar[dict[str, BaseSkip]] = {}

    @classmethod
    def init(cls, config: Any) -> None:
        """Build the skips of every registered role from ``config.skip`` (the whole trainer config)."""
        block = config.get(_SKIP_BLOCK) if hasattr(config, "get") else getattr(config, _SKIP_BLOCK, None)
        cls.config = omega_conf_to_dataclass(block or {}, SkipManagerConfig)
        cls.step = -1
        cls.skip_instances = {}
        for name, skip_cls in SKIP_REGISTRY.items():
            local = getattr(cls.config, name, None)
            if local is not None and local.enable:
                cls.skip_instances[name] = skip_cls(local, config)

    @classmethod
    def set_step(cls, step: int) -> None:
        cls.step = step

    @staticmethod
    def _is_validation(args: tuple, kwargs: dict) -> bool:
        batch = kwargs.get("prompts")
        if batch is None:
            batch = next((a for a in args if hasattr(a, "meta_info") or hasattr(a, "non_tensor_data")), None)
        if batch is None:
            return False
        info = getattr(batch, "meta_info", None)
        if info is None:
            info = getattr(batch, "non_tensor_data", None)
        try:
            return bool((info or {}).get("validate", False))
        except AttributeError:
            return False

    @classmethod
    def _active(cls, role: str, args: tuple, kwargs: dict) -> tuple[BaseSkip, int] | None:
        if cls._is_validation(args, kwargs):
            return None
        skip = cls.skip_instances.get(role)
        if skip is None or not skip.is_enabled():
            return None
        step = skip.extract_step(*args, **kwargs) if skip.support_online_step else cls.step
        return (skip, step) if step in skip.steps else None

    @classmethod
    def annotate(cls, role: str, **kwargs_outer: Any) -> Callable:
        """Decorator for the stage of ``role`` (sync or async): served from a dump when one serves this step,
        else run and dumped."""

        def decorator(func: Callable) -> Callable:
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    active = cls._active(role, args, kwargs)
                    if active is None:
                        return await func(*args, **kwargs)
                    skip, step = active
                    if skip.meet_precondition(step, func, *args, **kwargs):
                        return skip.warp_function(step, func, *args, **kwargs)
                    result = await func(*args, **kwargs)
                    skip.prepare_data(step, result, *args, **kwargs)
                    return result

                return async_wrapper

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                active = cls._active(role, args, kwargs)
                if active is None:
                    return func(*args, **kwargs)
                skip, step = active
                if skip.meet_precondition(step, func, *args, **kwargs):
                    return skip.warp_function(step, func, *args, **kwargs)
                result = func(*args, **kwargs)
                skip.prepare_data(step, result, *args, **kwargs)
                return result

            return wrapper

        return decorator
