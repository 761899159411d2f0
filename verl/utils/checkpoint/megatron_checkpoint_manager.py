"""verl's ``MegatronCheckpointManager`` import path. Megatron-LM training is not part of this build: the class
imports (and subclasses BaseCheckpointManager, so type checks hold) but building one raises MissingExtraError."""

from verl.models.mcore._missing import megatron_class
from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

__all__ = ["MegatronCheckpointManager"]

MegatronCheckpointManager = megatron_class("MegatronCheckpointManager", __name__, base=BaseCheckpointManager)
