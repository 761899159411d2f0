"""``FSDPUlyssesShardingManager``: the identity without sequence parallelism; defined in :mod:`verl.utils.ulysses`."""

from verl.utils.ulysses import FSDPUlyssesShardingManager

__all__ = ["FSDPUlyssesShardingManager"]
