"""vLLM as a standalone rollout replica: verl's ``vLLMReplica`` and ``AsyncvLLMServer``.

``AsyncvLLMServer`` is this package's vLLM server class
(:class:`~verl.workers.rollout.vllm.server.VLLMRolloutServer`, one ``AsyncLLM`` engine behind the token-level
contract). ``vLLMReplica`` is a :class:`~verl.workers.rollout.replica.StandaloneReplica` running it as a Ray actor
with ``tensor_model_parallel_size x data_parallel_size`` GPUs, built from verl's arguments
``(replica_rank, config, model_config, gpus_per_node)``. Without vLLM installed, building either raises an
``MissingExtraError`` naming ``pip install verl[vllm]``.
"""

from __future__ import annotations

from typing import Any

from verl.utils.extras import require_package
from verl.workers.rollout.base import as_rollout_config
from verl.workers.rollout.replica import StandaloneReplica
from verl.workers.rollout.utils import engine_gpus, model_path_of
from verl.workers.rollout.vllm.server import VLLMRolloutServer

__all__ = ["AsyncvLLMServer", "vLLMReplica"]

AsyncvLLMServer = VLLMRolloutServer


class vLLMReplica(StandaloneReplica):  # noqa: N801 - verl's class name
    """One vLLM replica actor. ``replica_rank`` names it in errors; ``gpus_per_node`` and ``is_reward_model`` are
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
        require_package("vllm", extra="vllm", what=type(self).__qualname__, feature="the vLLM engine")
        self.replica_rank = int(replica_rank)
        self.is_reward_model = bool(is_reward_model)
        config = as_rollout_config(config)
        kwargs.setdefault("num_gpus", engine_gpus(config))
        super().__init__(config, model_path_of(model_config), name="vllm", **kwargs)
