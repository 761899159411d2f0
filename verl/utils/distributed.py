"""Global torch.distributed process group of a trainer process, as verl's entry points set it up.

Two launch styles exist: ``torchrun`` (RANK / LOCAL_RANK / WORLD_SIZE / MASTER_* in the environment, one process per
device: :func:`initialize_global_process_group`) and Ray workers (RayWorkerGroup sets RANK / WORLD_SIZE / MASTER_*,
each worker sees one device: :func:`initialize_global_process_group_ray`). Both use gloo for CPU tensors and nccl for
CUDA tensors on a GPU node, and gloo alone on a CPU-only machine. ``DIST_INIT_METHOD`` overrides the rendezvous
(e.g. ``tcp://host:port`` or ``file:///shared/path``).
"""

from __future__ import annotations

import datetime
import logging
import os

import torch
import torch.distributed as dist

from verl.utils.device import get_device_name, is_cuda_available

__all__ = [
    "initialize_global_process_group",
    "initialize_global_process_group_ray",
    "destroy_global_process_group",
    "set_numa_affinity",
    "default_backend",
    "normalize_backend",
]

logger = logging.getLogger(__name__)


def default_backend(device_type: str | None = None) -> str:
    """The ``init_process_group`` backend for ``device_type`` (default: this machine's device).

    ``cpu:gloo,cuda:nccl`` for CUDA (gloo still serves CPU tensors such as gathered RNG states), plain ``gloo``
    for CPU: ``cpu:gloo,cpu:gloo`` would name ``cpu`` twice, which torch rejects.
    """
    device_type = device_type or ("cuda" if is_cuda_available else "cpu")
    return "gloo" if device_type == "cpu" else f"cpu:gloo,{device_type}:nccl"


def normalize_backend(backend: str) -> str:
    """``backend`` with repeated ``device:backend`` pairs dropped, so strings built as
    ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"`` also work on a CPU run (``cpu:gloo``).

    Two different backends for one device type stay an error: that is a real conflict.
    """
    if ":" not in backend:
        return backend
    pairs: dict[str, str] = {}
    for pair in backend.split(","):
        device, sep, name = pair.strip().partition(":")
        if not sep:
            return backend  # malformed: let torch report it in its own words
        device, name = device.strip().lower(), name.strip().lower()
        if pairs.setdefault(device, name) != name:
            raise ValueError(f"backend {backend!r} gives device type {device!r} two backends: {pairs[device]}, {name}")
    return ",".join(f"{device}:{name}" for device, name in pairs.items())


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(
                f"environment variable {name} is not set; start the script with torchrun (or set "
                "RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself)"
            )
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _init(backend: str, rank: int, world_size: int, timeout_second: float | None) -> None:
    init_method = os.environ.get("DIST_INIT_METHOD") or None
    if init_method is None and not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        if world_size > 1:
            raise RuntimeError(
                f"rank {rank} of {world_size}: MASTER_ADDR/MASTER_PORT (or DIST_INIT_METHOD) are not "
                "set, so the ranks cannot find each other"
            )
        from verl.utils.net_utils import get_free_port

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(get_free_port(os.environ["MASTER_ADDR"])[0])
    kwargs = {"timeout": datetime.timedelta(seconds=timeout_second)} if timeout_second is not None else {}
    dist.init_process_group(
        backend=normalize_backend(backend), rank=rank, world_size=world_size, init_method=init_method, **kwargs
    )


def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
    """Join the ``torchrun`` job's process group and select this process's CUDA device (``LOCAL_RANK``).

    Returns ``(local_rank, rank, world_size)``. Calling it again in an initialised process only re-reads them.
    """
    local_rank = _env_int("LOCAL_RANK")
    rank = _env_int("RANK")
    world_size = _env_int("WORLD_SIZE")
    if not dist.is_initialized():
        _init(default_backend(), rank, world_size, timeout_second)
    if is_cuda_available:
        torch.cuda.set_device(local_rank)
    return local_rank, rank, world_size


def initialize_global_process_group_ray(timeout_second: int | None = None, backend: str | None = None) -> None:
    """Join the process group of a Ray worker group (RANK / WORLD_SIZE default to 0 / 1); idempotent."""
    if dist.is_initialized():
        return
    _init(backend or default_backend(), _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), timeout_second)


def destroy_global_process_group() -> None:
    """Leave and destroy the default process group, if this process has one."""
    if dist.is_initialized():
        dist.destroy_process_group()


def _cpus_near_gpu(device_index: int) -> set[int] | None:
    """The CPUs on the NUMA node of CUDA device ``device_index`` (from sysfs), or None when not discoverable."""
    props = torch.cuda.get_device_properties(device_index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    address = f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    path = f"/sys/bus/pci/devices/{address}/local_cpulist"
    if not os.path.exists(path):
        return None
    cpus: set[int] = set()
    with open(path) as handle:
        for part in handle.read().strip().split(","):
            if not part:
                continue
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus or None


def set_numa_affinity() -> None:
    """Pin this process to the CPUs of its GPU's NUMA node, so host-side copies stay on local memory.

    Uses the process's current CUDA device (``LOCAL_RANK`` under torchrun, the one visible device under Ray).
    Without CUDA, or where the node layout cannot be read (containers without sysfs), nothing changes and a
    warning says why.
    """
    if get_device_name() != "cuda":
        return
    if not hasattr(os, "sched_setaffinity"):
        logger.warning("set_numa_affinity: this platform cannot set CPU affinity; leaving it unchanged")
        return
    device_index = torch.cuda.current_device()
    try:
        cpus = _cpus_near_gpu(device_index)
        if cpus is None:
            logger.warning(
                "set_numa_affinity: the NUMA node of cuda:%d is unknown; leaving CPU affinity unchanged", device_index
            )
            return
        allowed = cpus & os.sched_getaffinity(0)
        if allowed:
            os.sched_setaffinity(0, allowed)
    except OSError as err:
        logger.warning("set_numa_affinity: could not pin to the CPUs near cuda:%d: %s", device_index, err)
