"""verl's synchronous TransferQueue trainer (``trainer.use_v1``), importable for recipes that name it.

``PPOTrainerSync`` is verl's colocated v1 trainer, which moves every batch through TransferQueue. This build has no
TransferQueue data plane, so constructing it raises :class:`~verl.utils.extras.MissingExtraError`; the same
algorithm (colocated rollout and training, weights synced after every step) is :class:`verl.trainer.ppo.ray_trainer.
RayPPOTrainer`, which ``python -m verl.trainer.main_ppo`` runs.
"""

from __future__ import annotations

from verl.utils.extras import unavailable_class

__all__ = ["PPOTrainerSync"]

PPOTrainerSync = unavailable_class(
    "PPOTrainerSync",
    __name__,
    "verl's TransferQueue trainer (trainer.use_v1=true)",
    package="transfer_queue",
    reason="batches move through Ray object refs here, not TransferQueue; use verl.trainer.ppo.ray_trainer."
    "RayPPOTrainer (python -m verl.trainer.main_ppo) for colocated synchronous PPO",
)
