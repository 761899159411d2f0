"""The skip mechanism's building blocks: actions, the base class and the registry of skippable roles.

A *skip* replaces an expensive stage of a training step (generation) by data dumped in an earlier run, so that a
run can be replayed or debugged without regenerating. :class:`~verl.utils.skip.skip_manager.SkipManager` builds one
instance per registered role from the ``skip.<role>`` config block and consults it around the decorated stage.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

__all__ = ["SKIP_REGISTRY", "BaseSkip", "SkipAction", "register_skip"]


class SkipAction(Enum):
    """What to return instead of running the stage."""

    CACHE = "cache"  # the dump of this very step (made by this run when missing)
    REPEAT = "repeat"  # the dump of this step, else of the nearest earlier (or later) dumped step
    RANDOM = "random"
    EMPTY = "empty"


class BaseSkip:
    """One role's skip behaviour, configured by its ``skip.<role>`` block (``enable``, ``dump_dir``, ``steps``,
    ``action``) with the whole trainer config at hand. Subclasses list ``support_actions`` and implement the four
    hooks; an instance may serve overlapping calls, so per-call state must not live on ``self``."""

    support_actions: tuple[SkipAction, ...] = ()
    support_online_step = False  # True: the step comes from the call's arguments (extract_step), not the trainer

    def __init__(self, local_config: Any, global_config: Any) -> None:
        self.action = SkipAction(local_config.action)
        self.enable = bool(local_config.enable)
        self.dump_dir = local_config.dump_dir
        self.steps = list(local_config.steps)
        self.global_config = global_config
        if self.action not in self.support_actions:
            raise ValueError(
                f"{type(self).__name__}: action {self.action.value!r} is not supported; use one of "
                f"{[a.value for a in self.support_actions]}"
            )

    def is_enabled(self) -> bool:
        return self.enable

    def meet_precondition(self, step: int, func: Callable, *args: Any, **kwargs: Any) -> bool:
        """Whether step ``step`` can be served from a dump (else the stage runs and :meth:`prepare_data` dumps)."""
        raise NotImplementedError(f"{type(self).__name__}.meet_precondition")

    def warp_function(self, step: int, func: Callable, *args: Any, **kwargs: Any) -> Any:
        """The stage's result for ``step`` taken from a dump (verl's spelling of "wrap")."""
        raise NotImplementedError(f"{type(self).__name__}.warp_function")

    def prepare_data(self, step: int, result: Any, *args: Any, **kwargs: Any) -> None:
        """Dump the freshly computed ``result`` of ``step``."""
        raise NotImplementedError(f"{type(self).__name__}.prepare_data")

    def extract_step(self, *args: Any, **kwargs: Any) -> int:
        """The step a call belongs to (only for ``support_online_step`` skips)."""
        raise NotImplementedError(f"{type(self).__name__}.extract_step")


SKIP_REGISTRY: dict[str, type[BaseSkip]] = {}


def register_skip(name: str) -> Callable[[type[BaseSkip]], type[BaseSkip]]:
    """Class decorator registering a skip under the role name ``name`` (its config block is ``skip.<name>``)."""

    def decorator(cls: type[BaseSkip]) -> type[BaseSkip]:
        SKIP_REGISTRY[name] = cls
        return cls

    return decorator
