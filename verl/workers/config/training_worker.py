"""``TrainingWorkerConfig``: everything :class:`verl.workers.engine_workers.TrainingWorker` needs to build its engine.

The worker picks the engine from ``model_type`` (``language_model`` / ``value_model``) and
``engine_config.strategy`` through :class:`verl.workers.engine.EngineRegistry`. When ``engine_config`` is None,
``auto_select_engine_optim_fn(model_config, device_name)`` must return the ``(engine_config, optimizer_config)`` pair,
so a recipe can choose per device without knowing it in advance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["MODEL_TYPES", "TrainingWorkerConfig"]

MODEL_TYPES = ("language_model", "value_model")


@dataclass
class TrainingWorkerConfig(BaseConfig):
    """What one training worker group trains (``model_config``), on which engine (``engine_config``), with which
    optimizer and checkpoint settings. ``extra_context`` carries recipe-specific values to the worker unchanged."""

    model_type: str | None = None
    model_config: Any = None
    engine_config: Any = None
    optimizer_config: Any = None
    checkpoint_config: Any = None
    profiler_config: Any = None
    auto_select_engine_optim_fn: Callable[[Any, str], tuple[Any, Any]] | None = None
    extra_context: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(
            self.model_type is None or self.model_type in MODEL_TYPES,
            "model_type",
            f"must be one of {list(MODEL_TYPES)}, got {self.model_type!r}",
        )
        check(
            self.auto_select_engine_optim_fn is None or callable(self.auto_select_engine_optim_fn),
            "auto_select_engine_optim_fn",
            f"must be callable, got {self.auto_select_engine_optim_fn!r}",
        )
