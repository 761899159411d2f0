"""Collective operations on DataProtos inside a torch.distributed process group (e.g. a tensor-parallel group
whose ranks each hold a slice of the rows and all need the whole batch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from tensordict import TensorDict

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["all_gather_data_proto"]


def _comm_device(group: Any) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_gather_data_proto(data: DataProto, process_group: Any = None) -> None:
    """Replace ``data``'s rows, in place, by the rows of every rank of ``process_group`` in rank order.

    Every rank must hold the same number of rows and the same keys. Tensors travel through ``all_gather`` on
    the backend's device and return to their own device; non-tensor arrays through ``all_gather_object``.
    ``meta_info`` is left as it is.
    """
    world = dist.get_world_size(group=process_group)
    if data.batch is not None:
        device = _comm_device(process_group)
        gathered = TensorDict({}, batch_size=[len(data) * world], device=data.batch.device)
        for key, tensor in data.batch.items(include_nested=True, leaves_only=True):
            local = tensor.contiguous().to(device)
            parts = [torch.empty_like(local) for _ in range(world)]
            dist.all_gather(parts, local, group=process_group)
            gathered.set(key, torch.cat(parts, dim=0).to(tensor.device))
        data.batch = gathered
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, data.non_tensor_batch, group=process_group)
    data.non_tensor_batch = {key: np.concatenate([part[key] for part in everyone]) for key in data.non_tensor_batch}
