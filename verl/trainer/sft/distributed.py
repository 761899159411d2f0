"""Process placement for the SFT trainer: one plain process, or a torchrun-launched group (gloo on CPU, nccl on GPU).

The trainer reads torchrun's environment (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``) rather than spawning anything
itself, so the same command scales from ``python -m verl.trainer.main_sft`` to ``torchrun --nproc_per_node 8 ...``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from verl.base_config import ConfigError

__all__ = ["DistContext", "init_distributed", "resolve_device_type"]


def resolve_device_type(device: str) -> str:
    """``trainer.device`` (auto|cpu|cuda) -> ``"cpu"`` or ``"cuda"``; asking for cuda without one is an error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "is 'cuda' but no CUDA device is visible; use trainer.device=cpu or auto", key="trainer.device"
        )
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"must be one of ['auto', 'cpu', 'cuda'], got {device!r}", key="trainer.device")
    return device


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from err


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: its rank, the group size and its torch device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks in place (a no-op in a single process) and return it."""
        if self.is_distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier()

    def shutdown(self) -> None:
        if self.is_distributed and dist.is_initialized():
            dist.destroy_process_group()


def init_distributed(device: str, nnodes: int | None = None, n_gpus_per_node: int | None = None) -> DistContext:
    """Join the process group torchrun describes (if any) and pick this rank's device.

    ``nnodes``/``n_gpus_per_node`` are optional cross-checks of the launcher's ``WORLD_SIZE``.
    """
    device_type = resolve_device_type(device)
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    expected = None
    if nnodes is not None or n_gpus_per_node is not None:
        expected = (nnodes or 1) * (n_gpus_per_node or 1)
    if expected is not None and expected != world_size:
        launch = (
            "launch with `torchrun --nnodes N --nproc_per_node M -m verl.trainer.main_sft ...`"
            if world_size == 1
            else "or drop the keys to use the launcher's size"
        )
        raise ConfigError(
            f"trainer.nnodes * trainer.n_gpus_per_node = {expected} but the launcher started {world_size} "
            f"process(es) (WORLD_SIZE); {launch}",
            key="trainer.n_gpus_per_node",
        )
    if device_type == "cuda":
        if local_rank >= torch.cuda.device_count():
            visible = torch.cuda.device_count()
            raise RuntimeError(f"LOCAL_RANK={local_rank} but only {visible} CUDA device(s) are visible")
        torch.cuda.set_device(local_rank)
        torch_device = torch.device("cuda", local_rank)
    else:
        torch_device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=torch_device)
