"""``BaseShardingManager``: a context manager around one phase of a worker, plus the data conversions in and out.

``with manager: out = manager.postprocess_data(compute(manager.preprocess_data(data)))``. The base class changes
nothing (the identity); subclasses reshard. ``timing`` collects the seconds a subclass spends resharding.
"""

from __future__ import annotations

from typing import Any

from verl.protocol import DataProto

__all__ = ["BaseShardingManager"]


class BaseShardingManager:
    """Identity sharding manager; subclasses override the four hooks."""

    def __init__(self) -> None:
        self.timing: dict[str, float] = {}

    def __enter__(self) -> BaseShardingManager:
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        return None

    def preprocess_data(self, data: DataProto) -> DataProto:
        """Data as the inner phase needs it (e.g. gathered over a sequence-parallel group)."""
        return data

    def postprocess_data(self, data: DataProto) -> DataProto:
        """The inner phase's output as the caller's dispatch expects it."""
        return data
