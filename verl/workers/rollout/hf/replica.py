"""``HFReplica``: the embedded ``hf`` engine as a standalone replica built from verl's replica arguments.

verl builds a replica per engine as ``cls(replica_rank, config, model_config, gpus_per_node, ...)`` (see
:func:`verl.workers.rollout.replica.get_rollout_replica_class`); this is that class for ``rollout.name=hf``: one Ray
actor serving :class:`~verl.workers.rollout.hf.server.HFRolloutServer` on one device (a GPU when the Ray cluster has
one, else the CPU).
"""

from __future__ import annotations

from typing import Any

from verl.workers.rollout.replica import StandaloneReplica
from verl.workers.rollout.utils import model_path_of

__all__ = ["HFReplica"]


def _default_gpus() -> int:
    import ray

    if not ray.is_initialized():
        return 0
    return 1 if ray.cluster_resources().get("GPU", 0) > 0 else 0


class HFReplica(StandaloneReplica):
    """One ``hf`` engine actor. ``replica_rank`` names it; ``gpus_per_node``, ``is_reward_model`` and
    ``is_teacher_model`` are accepted for verl's signature; extra keyword arguments go to :class:`StandaloneReplica`
    (placement, ``num_gpus``, timeouts)."""

    def __init__(
        self,
        replica_rank: int,
        config: Any,
        model_config: Any,
        gpus_per_node: int = 8,
        is_reward_model: bool = False,
        is_teacher_model: bool = False,
        **kwargs: Any,
    ) -> None:
        self.gpus_per_node = int(gpus_per_node)
        self.is_reward_model = bool(is_reward_model)
        self.is_teacher_model = bool(is_teacher_model)
        kwargs.setdefault("num_gpus", _default_gpus())
        super().__init__(config, model_path_of(model_config), name="hf", replica_rank=int(replica_rank), **kwargs)
