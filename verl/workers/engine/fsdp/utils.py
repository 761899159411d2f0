"""Device mesh and sharding strategy of the FSDP engine (verl's ``verl.workers.engine.fsdp.utils``).

The mesh is the one the FSDP2 workers shard over (:func:`verl.workers.fsdp.distributed.build_fsdp_mesh`): 1-D over
every rank, or 2-D ``(ddp, fsdp)`` for hybrid sharding when ``fsdp_size`` divides the world. FSDP2 has no
``ShardingStrategy`` argument; :func:`get_sharding_strategy` names the FSDP1 strategy equivalent to a mesh (and to
``reshard_after_forward``, verl's ``zero3_enable``) for code that still reads it.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import ShardingStrategy

from verl.utils.device import get_device_name
from verl.workers.fsdp.distributed import build_fsdp_mesh

__all__ = ["create_device_mesh", "get_sharding_strategy"]


def create_device_mesh(world_size: int, fsdp_size: int, device_type: str | None = None) -> DeviceMesh:
    """The FSDP mesh over ``world_size`` ranks; ``fsdp_size`` < 0 or >= the world size gives a 1-D mesh.

    ``device_type`` defaults to this machine's (:func:`~verl.utils.device.get_device_name`), so on a CPU run the
    mesh is a ``cpu`` mesh that FSDP2 shards over with gloo; pass ``"cpu"`` to shard on the CPU of a GPU machine.
    Needs an initialised process group.
    """
    if fsdp_size is None or fsdp_size < 0 or fsdp_size >= world_size:
        fsdp_size = -1
    return build_fsdp_mesh(device_type or get_device_name(), int(world_size), int(fsdp_size), key="fsdp_size")


def get_sharding_strategy(device_mesh: DeviceMesh, zero3_enable: bool = True) -> ShardingStrategy:
    """FULL_SHARD / HYBRID_SHARD for a 1-D / 2-D mesh (SHARD_GRAD_OP / _HYBRID_SHARD_ZERO2 without zero3)."""
    if device_mesh.ndim == 1:
        return ShardingStrategy.FULL_SHARD if zero3_enable else ShardingStrategy.SHARD_GRAD_OP
    if device_mesh.ndim == 2:
        return ShardingStrategy.HYBRID_SHARD if zero3_enable else ShardingStrategy._HYBRID_SHARD_ZERO2
    raise NotImplementedError(
        f"get_sharding_strategy: a device mesh of {device_mesh.ndim} dims; only 1 (fsdp) or 2 (ddp, fsdp) are supported"
    )
