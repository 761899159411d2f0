"""``RLInsightLogger``: verl's bridge to the ``rl-insight`` monitoring service (scalar gauges and runtime traces).

The service is reached through its client package, ``rl_insight`` (``pip install rl-insight``), which this package
does not depend on. Reporting is switched on per process by ``VERL_RL_INSIGHT_ENABLE=1``; while it is off every class
method returns at once without importing anything, so code instrumented with ``RLInsightLogger.trace_state(...)``
runs unchanged everywhere. Constructing the logger means choosing it as a backend, so that needs the package and
raises ``MissingExtraError`` naming it when it is missing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any, ClassVar

from verl.utils.extras import require_package

__all__ = ["RLInsightLogger"]

_PACKAGE = "rl_insight"
_FEATURE = "the rl-insight monitoring client"


class RLInsightLogger:
    """Scalar metrics as rl-insight gauges (``a/b`` keys become ``a_b``), plus state and span traces.

    State is per process (class attributes), as the client library keeps one session per process.
    """

    ENABLE_ENV: ClassVar[str] = "VERL_RL_INSIGHT_ENABLE"
    _module: ClassVar[ModuleType | None] = None
    _init_done: ClassVar[bool] = False

    def __init__(self, project_name: str | None, experiment_name: str | None, config: Any = None) -> None:
        require_package(_PACKAGE, extra=None, what="verl.utils.tracking.RLInsightLogger", feature=_FEATURE)
        self.init(project_name=project_name, experiment_name=experiment_name, config=config)

    @classmethod
    def enabled(cls) -> bool:
        """Whether this process reports to rl-insight (``VERL_RL_INSIGHT_ENABLE=1``)."""
        return os.getenv(cls.ENABLE_ENV) == "1"

    @classmethod
    def _client(cls) -> ModuleType:
        if cls._module is None:
            require_package(_PACKAGE, extra=None, what="verl.utils.tracking.RLInsightLogger", feature=_FEATURE)
            import importlib

            cls._module = importlib.import_module(_PACKAGE)
        return cls._module

    @classmethod
    def init(cls, project_name: str | None = None, experiment_name: str | None = None, config: Any = None) -> None:
        """Open the session once per process; ``config.trainer.rl_insight`` (when present) goes to the client."""
        if not cls.enabled() or cls._init_done:
            return
        trainer = config.get("trainer") if hasattr(config, "get") else None
        options = (trainer.get("rl_insight") if hasattr(trainer, "get") else None) or {}
        cls._client().init(project=project_name, experiment_name=experiment_name, config=options)
        cls._init_done = True

    @classmethod
    def _ensure_init(cls) -> None:
        if not cls._init_done:
            cls._client().init()
            cls._init_done = True

    @classmethod
    def log(cls, data: Mapping[str, Any], step: int | None = None) -> None:
        """Report every value of ``data`` that converts to a float as a gauge; others are skipped."""
        if not cls.enabled():
            return
        cls._ensure_init()
        gauge = cls._client().metric_gauge
        for key, value in data.items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            gauge(str(key).replace("/", "_"), number)

    @classmethod
    @contextlib.contextmanager
    def trace_state(cls, state_name: str, *, state_lane_id: str | int | None = None, **labels: Any) -> Iterator[None]:
        """Mark the enclosed block as state ``state_name`` on lane ``state_lane_id``; a no-op while disabled."""
        if not cls.enabled():
            yield
            return
        cls._ensure_init()
        with cls._client().trace_state(state_name, state_lane_id=state_lane_id, **labels):
            yield

    @classmethod
    def trace_span(
        cls, name: str, *, start_time_ns: int, end_time_ns: int, attributes: Mapping[str, Any] | None = None
    ) -> None:
        """Report one finished span; skipped while disabled or when the client has no span API."""
        if not cls.enabled():
            return
        client = cls._client()
        if not callable(getattr(client, "trace_span", None)):
            return
        cls._ensure_init()
        client.trace_span(
            name=name, start_time_ns=start_time_ns, end_time_ns=end_time_ns, attributes=dict(attributes or {})
        )

    @classmethod
    def finish(cls) -> None:
        """Close the session opened by :meth:`init` (nothing to do when none is open)."""
        if not cls._init_done:
            return
        cls._client().finish()
        cls._init_done = False
