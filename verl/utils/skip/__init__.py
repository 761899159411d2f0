"""Replaying stages of a training step from dumps of an earlier run (verl's ``skip`` block).

``RolloutSkip`` (role ``rollout``) serves ``generate_sequences``. verl's TransferQueue and fully-async variants
(``RolloutTqSkip``, ``AsyncRolloutSkip``) are not part of this build.
"""

from verl.utils.extras import unavailable_class
from verl.utils.skip.base_skip import SKIP_REGISTRY, BaseSkip, SkipAction, register_skip
from verl.utils.skip.config import (
    AsyncRolloutSkipConfig,
    RolloutSkipConfig,
    RolloutTqSkipConfig,
    SkipManagerConfig,
)
from verl.utils.skip.rollout_skip import RolloutSkip
from verl.utils.skip.skip_manager import SkipManager

RolloutTqSkip = unavailable_class(
    "RolloutTqSkip",
    __name__,
    "verl's TransferQueue trainer",
    base=RolloutSkip,
    reason="this build's trainer does not use TransferQueue; use RolloutSkip (skip.rollout)",
)
AsyncRolloutSkip = unavailable_class(
    "AsyncRolloutSkip",
    __name__,
    "rollout skipping in the fully-async trainer",
    base=RolloutSkip,
    reason="only the synchronous trainer's generation can be skipped here (skip.rollout)",
)

__all__ = [
    "SKIP_REGISTRY",
    "AsyncRolloutSkip",
    "AsyncRolloutSkipConfig",
    "BaseSkip",
    "RolloutSkip",
    "RolloutSkipConfig",
    "RolloutTqSkip",
    "RolloutTqSkipConfig",
    "SkipAction",
    "SkipManager",
    "SkipManagerConfig",
    "register_skip",
]
