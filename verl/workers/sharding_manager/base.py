"""``BaseShardingManager``: a context manager around one phase of a worker; defined in :mod:`verl.utils.ulysses`."""

from verl.utils.ulysses import BaseShardingManager

__all__ = ["BaseShardingManager"]
