"""``FSDPUlyssesShardingManager``: switch to a model's Ulysses sequence-parallel group and regroup data for it.

Ulysses sequence parallelism is not part of this build, so the manager accepts a worker without a
sequence-parallel mesh (``device_mesh=None``, or a mesh whose ``sp`` dimension has size 1) and is then the
identity, which is what verl's workers do in that case; a real sequence-parallel mesh is refused.
"""

from __future__ import annotations

from typing import Any

from verl.workers.sharding_manager.base import BaseShardingManager

__all__ = ["FSDPUlyssesShardingManager"]


def _sp_size(device_mesh: Any) -> int:
    names = getattr(device_mesh, "mesh_dim_names", None) or ()
    return int(device_mesh["sp"].size()) if "sp" in names else 1


class FSDPUlyssesShardingManager(BaseShardingManager):
    """Identity for a worker without sequence parallelism; ``NotImplementedError`` for an ``sp`` group > 1."""

    def __init__(self, device_mesh: Any = None) -> None:
        super().__init__()
        if device_mesh is not None and _sp_size(device_mesh) > 1:
            raise NotImplementedError(
                f"FSDPUlyssesShardingManager: a sequence-parallel mesh of size "
                f"{_sp_size(device_mesh)}; Ulysses sequence parallelism is not part of this "
                "build (set ulysses_sequence_parallel_size=1)"
            )
        self.device_mesh = device_mesh
