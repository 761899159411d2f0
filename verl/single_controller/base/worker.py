"""Worker: the base class of every process a worker group drives."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
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


class MeshRegistrationError(ValueError, AssertionError):
    """A mesh declared twice on one worker, or declared from an unusable layout. Both a ValueError and an
    AssertionError (verl asserts here)."""


@dataclass
class DistRankInfo:
    """This rank's coordinates in a tensor / data / pipeline / context parallel layout."""

    tp_rank: int
    dp_rank: int
    pp_rank: int
    cp_rank: int


@dataclass
class DistGlobalInfo:
    """Sizes of the tensor / data / pipeline / context parallel dimensions."""

    tp_size: int
    dp_size: int
    pp_size: int
    cp_size: int


class WorkerHelper:
    """Node address and free-port helpers for a worker that hosts a rendezvous (a process group, a server)."""

    @staticmethod
    def _get_node_ip() -> str:
        try:
            import ray

            if ray.is_initialized():
                return ray.util.get_node_ip_address().strip("[]")
        except ImportError:
            pass
        return socket.gethostbyname(socket.gethostname())

    @staticmethod
    def _get_free_port() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def get_available_master_addr_port(self) -> tuple[str, str]:
        """This node's IP and a port free right now."""
        return self._get_node_ip(), str(self._get_free_port())


class Worker(WorkerHelper):
    """One rank of a worker group. Subclass it and mark group-callable methods with ``@register``.

    The torch.distributed variables are read before ``__init__`` runs (in ``__new__``), so they are available even
    when a subclass calls ``super().__init__()`` late or not at all.
    """

    # Attribute through which the roles of one fused (colocated) process see each other: {role: worker}.
    fused_worker_attr_name = "fused_worker_dict"

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
        self.fused_worker_dict: dict[str, Worker] = {}

    @classmethod
    def env_keys(cls) -> list[str]:
        """Environment variables a worker group sets to configure each Worker."""
        return [
            "WORLD_SIZE",
            "RANK",
            "LOCAL_WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES",
        ]

    def get_fused_worker_by_name(self, worker_name: str) -> Worker | None:
        """The worker of role ``worker_name`` living in this same process (fused/colocated roles), or None."""
        return self.fused_worker_dict.get(worker_name)

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
        visible = getattr(self, "_cuda_visible_devices", None)
        if visible is not None:
            return visible
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    # -- mesh-aware dispatch --------------------------------------------------------------------------------
    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this rank's data-parallel rank on ``mesh_name`` and whether the driver keeps its output."""
        if mesh_name in self._mesh_info:
            raise MeshRegistrationError(f"mesh {mesh_name!r} is already registered on rank {self.rank}")
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

    def query_collect_info(self, mesh_name: str) -> bool:
        """Whether the driver keeps this rank's output on ``mesh_name``."""
        return self._query_collect_info(mesh_name)

    def get_dispatch_collect(self) -> dict[str, dict[str, Any]]:
        """Every registered mesh: ``{"dispatch_dp_rank": {mesh: dp_rank}, "collect_dp_rank": {mesh: is_collect}}``.

        Lets an outer worker re-declare the mesh of a worker it wraps (``set_dispatch_collect``).
        """
        return {
            "dispatch_dp_rank": {mesh: dp for mesh, (dp, _) in self._mesh_info.items()},
            "collect_dp_rank": {mesh: keep for mesh, (_, keep) in self._mesh_info.items()},
        }

    def set_dispatch_collect(
        self, mesh_name: str, dispatch_dp_rank: dict[str, int], collect_dp_rank: dict[str, bool]
    ) -> None:
        """Register ``mesh_name`` with the layout another worker declared (the output of its
        ``get_dispatch_collect``); that worker must have declared exactly one mesh."""
        if len(dispatch_dp_rank) != 1 or set(dispatch_dp_rank) != set(collect_dp_rank):
            raise MeshRegistrationError(
                f"set_dispatch_collect({mesh_name!r}) needs exactly one mesh in dispatch_dp_rank and the same one in "
                f"collect_dp_rank, got {sorted(dispatch_dp_rank)} and {sorted(collect_dp_rank)}"
            )
        (source,) = dispatch_dp_rank
        self._register_dispatch_collect_info(mesh_name, int(dispatch_dp_rank[source]), bool(collect_dp_rank[source]))

    # -- generic helpers callable through the group -----------------------------------------------------------
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func: Callable, *args, **kwargs):
        """Run ``func(self, *chunk_args)`` on every rank with that rank's DataProto chunk."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func: Callable, *args, **kwargs):
        """Run ``func(*args, **kwargs)`` on rank 0 only."""
        return func(*args, **kwargs)
