"""Worker: the base class of every process a worker group drives."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from verl.single_controller.base.decorator import Dispatch, Execute, register

# Set by RayWorkerGroup on every process it spawns; tells Worker.__new__ which backend setup to run.
BACKEND_ENV = "VERL_WG_BACKEND"


def _read_int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


def read_distributed_env() -> dict[str, Any]:
    """RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT, validated.

    Missing variables mean a single process (rank 0 of 1), so a Worker can also be built in a plain script.
    """
    world_size = _read_int_env("WORLD_SIZE", 1)
    rank = _read_int_env("RANK", 0)
    if world_size < 1:
        raise ValueError(f"environment variable WORLD_SIZE must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"environment variable RANK={rank} is outside [0, WORLD_SIZE={world_size})")
    local_world_size = _read_int_env("LOCAL_WORLD_SIZE", world_size)
    local_rank = _read_int_env("LOCAL_RANK", 0)
    if not 0 <= local_rank < max(local_world_size, 1):
        raise ValueError(
            f"environment variable LOCAL_RANK={local_rank} is outside [0, LOCAL_WORLD_SIZE={local_world_size})"
        )
    master_port = os.environ.get("MASTER_PORT") or None
    if master_port is not None and not master_port.isdigit():
        raise ValueError(f"environment variable MASTER_PORT must be a port number, got {master_port!r}")
    return {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "local_world_size": local_world_size,
        "master_addr": os.environ.get("MASTER_ADDR") or None,
        "master_port": master_port,
    }


class Worker:
    """One rank of a worker group. Subclass it and mark group-callable methods with ``@register``.

    The torch.distributed variables are read before ``__init__`` runs (in ``__new__``), so they are available even
    when a subclass calls ``super().__init__()`` late or not at all.
    """

    def __new__(cls, *args, **kwargs):
        if os.environ.get(BACKEND_ENV) == "ray":
            from verl.single_controller.ray.worker_process import setup_worker_process

            setup_worker_process()
        instance = super().__new__(cls)
        instance._configure_from_env()
        return instance

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        if not hasattr(self, "_dist_env"):
            self._configure_from_env()
        self._cuda_visible_devices = cuda_visible_devices

    def _configure_from_env(self) -> None:
        self._dist_env = read_distributed_env()
        self._mesh_info: dict[str, tuple[int, bool]] = {}

    # -- identity ---------------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._dist_env["rank"]

    @property
    def world_size(self) -> int:
        return self._dist_env["world_size"]

    @property
    def local_rank(self) -> int:
        return self._dist_env["local_rank"]

    @property
    def local_world_size(self) -> int:
        return self._dist_env["local_world_size"]

    def get_master_addr_port(self) -> tuple[str | None, str | None]:
        """(MASTER_ADDR, MASTER_PORT) of this group's torch.distributed rendezvous."""
        return self._dist_env["master_addr"], self._dist_env["master_port"]

    def get_cuda_visible_devices(self) -> str:
        """Devices this process may use (what Ray assigned on a GPU node, "" on CPU)."""
        if getattr(self, "_cuda_visible_devices", None) is not None:
            return self._cuda_visible_devices
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    # -- mesh-aware dispatch --------------------------------------------------------------------------------
    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this rank's data-parallel rank on ``mesh_name`` and whether the driver keeps its output."""
        if mesh_name in self._mesh_info:
            raise ValueError(f"mesh {mesh_name!r} is already registered on rank {self.rank}")
        if not isinstance(dp_rank, int) or dp_rank < 0:
            raise ValueError(f"mesh {mesh_name!r}: dp_rank must be a non-negative int, got {dp_rank!r}")
        self._mesh_info[mesh_name] = (dp_rank, bool(is_collect))

    def _query_mesh_info(self, mesh_name: str) -> tuple[int, bool]:
        if mesh_name not in self._mesh_info:
            raise KeyError(
                f"mesh {mesh_name!r} is not registered on rank {self.rank}; call "
                f"self._register_dispatch_collect_info({mesh_name!r}, dp_rank, is_collect) in the worker"
            )
        return self._mesh_info[mesh_name]

    def _query_dispatch_info(self, mesh_name: str) -> int:
        return self._query_mesh_info(mesh_name)[0]

    def _query_collect_info(self, mesh_name: str) -> bool:
        return self._query_mesh_info(mesh_name)[1]

    # -- generic helpers callable through the group -----------------------------------------------------------
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func: Callable, *args, **kwargs):
        """Run ``func(self, *chunk_args)`` on every rank with that rank's DataProto chunk."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func: Callable, *args, **kwargs):
        """Run ``func(*args, **kwargs)`` on rank 0 only."""
        return func(*args, **kwargs)
