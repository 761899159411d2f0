"""``RewardModelDataProcessorConfig`` (verl 0.6): user functions that rewrite a batch before and after a model-based
reward scores it, loaded from one ``.py`` file (or module) ``path``.

``get_process_fn()`` returns ``(preprocess_fn, postprocess_fn)``; a function whose name is not set is None, so a
recipe can use one of the two hooks alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["RewardModelDataProcessorConfig"]


@dataclass
class RewardModelDataProcessorConfig(BaseConfig):
    """``path``: the file or module holding the functions; ``preprocess_fn_name`` / ``postprocess_fn_name``: their
    names in it (either may be null)."""

    path: str | None = None
    preprocess_fn_name: str | None = None
    postprocess_fn_name: str | None = None

    def __post_init__(self) -> None:
        named = self.preprocess_fn_name or self.postprocess_fn_name
        check(
            not named or bool(self.path),
            "path",
            "must name the .py file (or module) that defines preprocess_fn_name / postprocess_fn_name",
        )

    def _load(self, name: str | None, key: str) -> Callable[..., Any] | None:
        if not name:
            return None
        from verl.utils.import_utils import load_extern_object

        function = load_extern_object(
            str(self.path), name, config_key="data_processor_config.path", what=f"reward-model {key}"
        )
        if not callable(function):
            raise TypeError(f"data_processor_config.{key}={name!r} in {self.path!r} is not callable")
        return function

    def get_process_fn(self) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
        """``(preprocess_fn, postprocess_fn)`` loaded from ``path``; None for a hook without a name."""
        return (
            self._load(self.preprocess_fn_name, "preprocess_fn_name"),
            self._load(self.postprocess_fn_name, "postprocess_fn_name"),
        )
