"""What a checkpoint holds: the ``checkpoint`` block of the actor and critic configs, read by every checkpoint
manager (it lives here, below the workers, because the managers of ``verl.utils.checkpoint`` read it too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig, check

__all__ = ["CHECKPOINT_CONTENTS", "CheckpointConfig"]

CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")


@dataclass
class CheckpointConfig(BaseConfig):
    """What a checkpoint holds. ``load_contents`` defaults to ``save_contents``. ``async_save``: model and
    optimizer shards are copied aside during the save and written in the background while training goes on;
    the step counts as saved (tracker file, ``trainer_state.pt``) once they are complete. ``save_lora_only`` keeps
    only the adapter tensors of a LoRA model; ``strict`` has no effect here."""

    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list[str] | None = None
    async_save: bool = False
    strict: bool = True
    save_lora_only: bool = False

    def __post_init__(self) -> None:
        if self.load_contents is None:
            object.__setattr__(self, "load_contents", list(self.save_contents))
        for key in ("save_contents", "load_contents"):
            bad = [c for c in getattr(self, key) if c not in CHECKPOINT_CONTENTS]
            check(not bad, key, f"unknown entries {bad}; allowed: {list(CHECKPOINT_CONTENTS)}")
