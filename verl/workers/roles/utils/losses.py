"""Old path of :mod:`verl.workers.utils.losses` (verl 0.6-0.7); the same loss functions."""

from verl.workers.utils.losses import ppo_loss, sft_loss, value_loss

__all__ = ["ppo_loss", "sft_loss", "value_loss"]
