"""SGLang as a standalone rollout replica: verl's ``SGLangReplica`` and ``AsyncSGLangServer``.

``AsyncSGLangServer`` is this package's SGLang server class
(:class:`~verl.workers.rollout.sglang.server.SGLangRolloutServer`, SGLang's ``Engine`` behind the token-level
contract). ``SGLangReplica`` is a :class:`~verl.workers.rollout.replica.StandaloneReplica` running it as a Ray actor
with ``tensor_model_parallel_size x data_parallel_size`` GPUs, built from verl's arguments
``(replica_rank, config, model_config, gpus_per_node)``. Without SGLang installed, building it raises
``MissingExtraError`` naming ``pip install verl[sglang]``.
"""

from __future__ import annotations

from typing import Any

from verl.utils.extras import require_package
from verl.workers.rollout.base import as_rollout_config
from verl.workers.rollout.replica import StandaloneReplica
from verl.workers.rollout.sglang.server import SGLangRolloutServer
from verl.workers.rollout.utils import engine_gpus, model_path_of

__all__ = ["AsyncSGLangServer", "SGLangReplica"]

AsyncSGLangServer = SGLangRolloutServer


class SGLangReplica(StandaloneReplica):
    """One SGLang replica actor. ``replica_rank`` names it in errors; ``gpus_per_node`` and ``is_reward_model`` are
    accepted for verl's signature; extra keyword arguments go to :class:`StandaloneReplica` (placement, timeouts)."""

    def __init__(
        self,
        replica_rank: int,
        config: Any,
        model_config: Any,
        gpus_per_node: int = 8,
        is_reward_model: bool = False,
        **kwargs: Any,
    ) -> None:
        require_package("sglang", extra="sglang", what=type(self).__qualname__, feature="the SGLang engine")
        self.replica_rank = int(replica_rank)
        self.is_reward_model = bool(is_reward_model)
        config = as_rollout_config(config)
        kwargs.setdefault("num_gpus", engine_gpus(config))
        super().__init__(config, model_path_of(model_config), name="sglang", **kwargs)
