"""Carving one reserved pool into several worker groups, and joining two pools into one.

Why: a pool's placement groups are reserved once; several rollout replicas (or a reward model next to them) should
each get a slice of those slots rather than reserve new ones. A slice (``SubRayResourcePool``) shares the parent's
placement groups and hands out the bundles ``[start_bundle_index, start_bundle_index + world size)`` in rank order.
"""

from __future__ import annotations

from typing import Any

from ray.util.placement_group import PlacementGroup

from verl.single_controller.ray.resource_pool import RayResourcePool

__all__ = ["SubRayResourcePool", "merge_resource_pool", "split_resource_pool"]


class SubRayResourcePool(RayResourcePool):
    """``subgroup_world_size`` consecutive slots of an existing pool, starting at ``start_bundle_index``.

    ``placement_groups`` are the parent's (already reserved); ``**kwargs`` are the parent's RayResourcePool settings.
    """

    def __init__(
        self, placement_groups: list[PlacementGroup], start_bundle_index: int, subgroup_world_size: int, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        total = sum(self.store)
        start, size = int(start_bundle_index), int(subgroup_world_size)
        if size < 1 or start < 0 or start + size > total:
            raise ValueError(
                f"SubRayResourcePool: slots [{start}, {start + size}) are outside the parent's {total} slot(s)"
            )
        self.pgs = list(placement_groups)
        self.start_bundle_index = start
        self.subgroup_world_size = size

    @property
    def world_size(self) -> int:
        return self.subgroup_world_size

    def get_placement_groups(
        self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str | None = None
    ) -> list[PlacementGroup]:
        assert self.pgs is not None  # set from the parent's groups in __init__
        return self.pgs

    def bundle_slots(self, pgs: list[PlacementGroup] | None = None) -> list[tuple[PlacementGroup, int]]:
        every = super().bundle_slots(self.pgs if pgs is None else pgs)
        return every[self.start_bundle_index : self.start_bundle_index + self.subgroup_world_size]

    def release(self) -> None:
        """A slice does not own its placement groups: releasing is the parent pool's job."""


def _parent_settings(pool: RayResourcePool) -> dict[str, Any]:
    return {
        "process_on_nodes": list(pool.store),
        "use_gpu": pool.use_gpu,
        "max_colocate_count": pool.max_colocate_count,
        "detached": pool.detached,
        "accelerator_type": pool.accelerator_type,
        "cpus_per_process": pool.cpus_per_process,
    }


def split_resource_pool(resource_pool: RayResourcePool, split_size: int | list[int]) -> list[SubRayResourcePool]:
    """Cut ``resource_pool`` (or a slice of one) into consecutive slices.

    Args:
        resource_pool: the pool to cut; its placement groups are reserved now if they were not yet.
        split_size: slots per slice (an int must divide the pool's world size), or one size per slice (summing to
            the world size).
    """
    world_size = resource_pool.world_size
    if isinstance(split_size, int):
        if split_size < 1 or world_size % split_size:
            raise ValueError(f"split_resource_pool: split_size={split_size} must divide the pool's {world_size} slots")
        sizes = [split_size] * (world_size // split_size)
    else:
        sizes = [int(size) for size in split_size]
        if any(size < 1 for size in sizes) or sum(sizes) != world_size:
            raise ValueError(
                f"split_resource_pool: split_size={list(split_size)} must be positive and sum to the pool's "
                f"{world_size} slots"
            )
    pgs = resource_pool.get_placement_groups()
    offset = resource_pool.start_bundle_index if isinstance(resource_pool, SubRayResourcePool) else 0
    settings = _parent_settings(resource_pool)
    slices = []
    for index, size in enumerate(sizes):
        slices.append(
            SubRayResourcePool(
                placement_groups=pgs,
                start_bundle_index=offset,
                subgroup_world_size=size,
                name_prefix=f"{resource_pool.name_prefix}_split_{index}",
                **settings,
            )
        )
        offset += size
    return slices


def merge_resource_pool(rp1: RayResourcePool, rp2: RayResourcePool) -> RayResourcePool:
    """One pool holding the slots of both (their placement groups are reserved now if they were not yet)."""
    for attr in ("use_gpu", "max_colocate_count", "n_gpus_per_node", "detached", "cpus_per_process"):
        if getattr(rp1, attr) != getattr(rp2, attr):
            raise ValueError(
                f"merge_resource_pool: pools {rp1.name_prefix!r} and {rp2.name_prefix!r} differ in {attr} "
                f"({getattr(rp1, attr)!r} vs {getattr(rp2, attr)!r})"
            )
    for pool in (rp1, rp2):
        if isinstance(pool, SubRayResourcePool):
            raise ValueError(f"merge_resource_pool: {pool.name_prefix!r} is a slice; merge whole pools")
    pgs = rp1.get_placement_groups() + rp2.get_placement_groups()
    merged = RayResourcePool(
        process_on_nodes=list(rp1.store) + list(rp2.store),
        use_gpu=rp1.use_gpu,
        name_prefix=f"{rp1.name_prefix}_{rp2.name_prefix}",
        max_colocate_count=rp1.max_colocate_count,
        detached=rp1.detached,
        accelerator_type=rp1.accelerator_type,
        cpus_per_process=rp1.cpus_per_process,
    )
    merged.pgs = pgs
    return merged
