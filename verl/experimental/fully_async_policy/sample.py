"""RolloutSample: one prompt group as it travels from the Rollouter through the MessageQueue to the trainer."""

from __future__ import annotations

from dataclasses import dataclass

from verl.protocol import DataProto

__all__ = ["RolloutSample"]


@dataclass
class RolloutSample:
    """``batch``: the group's ``rollout.n`` rows (full trainer layout); ``index``: the prompt's position in the
    rollouter's stream (the trainer orders a batch by it so results do not depend on completion order)."""

    batch: DataProto
    index: int
    uid: str
    start_version: int
    end_version: int
    num_aborts: int
    num_failed: int = 0
    generate_s: float = 0.0

    def __len__(self) -> int:
        return len(self.batch)
