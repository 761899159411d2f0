"""Policy actors: the interface workers use and its data-parallel (FSDP/plain torch) implementation."""

from verl.workers.actor.base import BasePPOActor
from verl.workers.actor.dp_actor import DataParallelPPOActor

__all__ = ["BasePPOActor", "DataParallelPPOActor"]
