"""Typed ``skip`` config block: one :class:`RolloutSkipConfig`-shaped group per skippable role."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig, check

__all__ = ["AsyncRolloutSkipConfig", "RolloutSkipConfig", "RolloutTqSkipConfig", "SkipManagerConfig"]

_ACTIONS = ("cache", "repeat")


@dataclass
class RolloutSkipConfig(BaseConfig):
    """``enable`` skipping generation at ``steps`` (trainer steps), serving dumps under ``dump_dir`` with
    ``action`` ``cache`` (this step's dump) or ``repeat`` (nearest dumped step)."""

    enable: bool = False
    dump_dir: str = "~/.verl/rollout_dump"
    steps: list[int] = field(default_factory=list)
    action: str = "cache"

    def __post_init__(self) -> None:
        check(isinstance(self.enable, bool), "enable", f"must be a bool, got {self.enable!r}")
        check(isinstance(self.dump_dir, str), "dump_dir", f"must be a path string, got {self.dump_dir!r}")
        check(
            isinstance(self.steps, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in self.steps),
            "steps",
            f"must be a list of ints, got {self.steps!r}",
        )
        check(self.action in _ACTIONS, "action", f"must be one of {list(_ACTIONS)}, got {self.action!r}")


@dataclass
class AsyncRolloutSkipConfig(RolloutSkipConfig):
    """The same settings for the fully-async trainer's rollouter (accepted; that skip is not in this build)."""


@dataclass
class RolloutTqSkipConfig(RolloutSkipConfig):
    """The same settings for verl's TransferQueue trainer (accepted; that skip is not in this build)."""


@dataclass
class SkipManagerConfig(BaseConfig):
    """The top-level ``skip`` block."""

    rollout: RolloutSkipConfig = field(default_factory=RolloutSkipConfig)
    async_rollout: AsyncRolloutSkipConfig = field(default_factory=AsyncRolloutSkipConfig)
    rollout_tq: RolloutTqSkipConfig = field(default_factory=RolloutTqSkipConfig)
