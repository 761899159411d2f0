"""The environment a RayWorkerGroup gives each of its processes: which keys are its own, and each rank's node-local
position."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.single_controller.base.worker import BACKEND_ENV
from verl.single_controller.ray.worker_process import PORT_RANGE_ENV, RENDEZVOUS_ENV

# Set by the worker group for every process; a user's worker_env may not change them (ranks and rendezvous would
# disagree between processes).
SYSTEM_ENV_KEYS = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "RAY_LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WG_PREFIX",
        "WG_BACKEND",
        BACKEND_ENV,
        RENDEZVOUS_ENV,
        PORT_RANGE_ENV,
    }
)


def check_worker_env(worker_env: Mapping[str, Any] | None) -> dict[str, str]:
    """``worker_env`` as strings; a ValueError names every key that would override the group's own variables."""
    if not worker_env:
        return {}
    if not isinstance(worker_env, Mapping):
        raise TypeError(f"worker_env must be a dict of environment variables, got {type(worker_env).__name__}")
    conflicts = sorted(SYSTEM_ENV_KEYS & set(worker_env))
    if conflicts:
        raise ValueError(f"worker_env cannot override the worker group's own environment variables {conflicts}")
    return {str(key): str(value) for key, value in worker_env.items()}


def check_port_range(port_range: Any) -> tuple[int, int] | None:
    """``master_port_range`` as ``(low, high)``: rank 0 binds the first free port with low <= port < high."""
    if port_range is None:
        return None
    try:
        low, high = (int(p) for p in port_range)
    except (TypeError, ValueError):
        raise ValueError(f"master_port_range must be [low, high], got {port_range!r}") from None
    if not 0 < low < high <= 65536:
        raise ValueError(f"master_port_range must satisfy 0 < low < high <= 65536, got {port_range!r}")
    return low, high


def local_layout(slots: list[tuple[Any, int]]) -> list[tuple[int, int]]:
    """``(LOCAL_RANK, LOCAL_WORLD_SIZE)`` of each slot: its index among this group's slots in the same placement
    group (one placement group lives on one node), and how many of this group's slots that placement group holds."""
    keys = [_pg_key(pg) for pg, _ in slots]
    totals: dict[Any, int] = {}
    for key in keys:
        totals[key] = totals.get(key, 0) + 1
    seen: dict[Any, int] = {}
    layout = []
    for key in keys:
        layout.append((seen.get(key, 0), totals[key]))
        seen[key] = seen.get(key, 0) + 1
    return layout


def _pg_key(pg: Any) -> Any:
    pg_id: Any = getattr(pg, "id", None)
    return pg_id.hex() if hasattr(pg_id, "hex") else id(pg)
