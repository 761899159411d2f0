"""The staleness budget: how many prompt groups the rollouter may have "open" between two weight syncs.

Definitions (docs/async_training.md): ``R = require_batches * ppo_mini_batch_size`` prompt groups per trainer update,
``T = trigger_parameter_sync_step`` updates per sync, ``s = staleness_threshold``. A group is *stale* when the
trainer consumes it under a weight version newer than the one it started under.

Budget: the rollouter counts the groups it started since the last sync plus those still unconsumed at that sync
(queued or in flight), and starts a new group only while the count is below ``R*T + floor(s*R*T)``. Since the
trainer consumes exactly ``R*T`` groups per sync period, at most ``floor(s*R*T)`` groups are left over at a sync,
so **at most floor(s*R*T) stale groups are consumed in any sync period** (0 when s = 0: the run is on-policy).

The same holds when a sync keeps requests running (``keep_requests_through_sync``) instead of aborting them: a
group in flight at a sync is a leftover either way, it keeps the version it started under, and no group starts while
the sync runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["StalenessBudget"]


@dataclass
class StalenessBudget:
    groups_per_update: int
    trigger_parameter_sync_step: int
    staleness_threshold: float

    def __post_init__(self) -> None:
        if self.groups_per_update < 1:
            raise ValueError(
                f"groups per update (require_batches x ppo_mini_batch_size) must be >= 1, got {self.groups_per_update}"
            )
        if self.trigger_parameter_sync_step < 1:
            raise ValueError(
                f"async_training.trigger_parameter_sync_step must be >= 1, got {self.trigger_parameter_sync_step}"
            )
        if self.staleness_threshold < 0:
            raise ValueError(f"async_training.staleness_threshold must be >= 0, got {self.staleness_threshold}")

    @property
    def groups_per_sync(self) -> int:
        return self.groups_per_update * self.trigger_parameter_sync_step

    @property
    def max_stale_groups(self) -> int:
        """Upper bound of stale groups consumed per sync period."""
        return math.floor(self.staleness_threshold * self.groups_per_sync + 1e-9)

    @property
    def max_open_groups(self) -> int:
        """Groups started since the last sync plus leftovers that the rollouter may have at once."""
        return self.groups_per_sync + self.max_stale_groups
