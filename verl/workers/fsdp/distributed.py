"""Process group and device mesh of an FSDP worker.

RayWorkerGroup puts RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in every worker's environment; this module turns
them into a torch.distributed process group (gloo on CPU, nccl plus gloo on CUDA, so CPU-side collectives such as
gathering RNG states still work) and into the device mesh FSDP2 shards over.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from verl.utils.distributed import default_backend

__all__ = ["resolve_device", "init_distributed", "build_fsdp_mesh", "device_for_rank"]

_DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str | None) -> str:
    """``trainer.device`` (auto|cpu|cuda) as ``cpu`` or ``cuda``; asking for cuda without one is an error."""
    device = device or "auto"
    if device not in _DEVICES:
        raise ValueError(f"trainer.device must be one of {list(_DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("trainer.device=cuda but this worker process sees no CUDA device")
    return device


def device_for_rank(device_type: str, local_rank: int) -> torch.device:
    """The torch device of this process: Ray usually shows each worker exactly one GPU, otherwise pick by rank."""
    if device_type == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    index = 0 if count <= 1 else local_rank % count
    return torch.device("cuda", index)


def init_distributed(device_type: str, rank: int, world_size: int, timeout_s: float = 1800.0) -> None:
    """Join the worker group's process group once per process (idempotent)."""
    if dist.is_initialized():
        return
    if world_size > 1 and not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        raise RuntimeError(
            f"rank {rank} of {world_size}: MASTER_ADDR/MASTER_PORT are not set; start the worker through "
            "RayWorkerGroup (or set the torch.distributed environment yourself)"
        )
    if world_size == 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if not os.environ.get("MASTER_PORT"):
            import socket

            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    if device_type == "cuda":
        torch.cuda.set_device(device_for_rank("cuda", int(os.environ.get("LOCAL_RANK", "0"))))
    dist.init_process_group(
        backend=default_backend(device_type),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def build_fsdp_mesh(
    device_type: str, world_size: int, fsdp_size: int, key: str = "fsdp_config.fsdp_size"
) -> DeviceMesh:
    """1-D mesh over all ranks (``fsdp_size`` -1 or the world size), else a 2-D (ddp, fsdp) mesh for hybrid sharding."""
    if fsdp_size in (-1, None) or fsdp_size >= world_size:
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("fsdp",))
    if fsdp_size < 1 or world_size % fsdp_size != 0:
        raise ValueError(f"{key}={fsdp_size} must be -1 or divide the number of worker processes ({world_size})")
    return init_device_mesh(device_type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))
