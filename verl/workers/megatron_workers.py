"""verl's ``verl.workers.megatron_workers``: the Megatron-LM policy, critic and reward-model workers.

Not part of this build (it trains with FSDP2 only): the classes import and subclass ``Worker`` so that recipes load
and role mappings type-check, and building one raises ``MissingExtraError``. The FSDP2 workers are in
:mod:`verl.workers.fsdp_workers`.
"""

from verl.models.mcore._missing import megatron_class
from verl.single_controller.base import Worker

__all__ = ["ActorRolloutRefWorker", "AsyncActorRolloutRefWorker", "CriticWorker", "MegatronWorker", "RewardModelWorker"]

MegatronWorker = megatron_class("MegatronWorker", __name__, base=Worker)
ActorRolloutRefWorker = megatron_class("ActorRolloutRefWorker", __name__, base=MegatronWorker)
AsyncActorRolloutRefWorker = megatron_class("AsyncActorRolloutRefWorker", __name__, base=ActorRolloutRefWorker)
CriticWorker = megatron_class("CriticWorker", __name__, base=MegatronWorker)
RewardModelWorker = megatron_class("RewardModelWorker", __name__, base=MegatronWorker)
