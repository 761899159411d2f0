"""CheckpointEngineWorker: the receiving end of a streaming checkpoint engine, next to a rollout server.

It receives the weight stream with its ``CheckpointEngine`` (see :mod:`verl.checkpoint_engine.streaming`) and hands
it to the server adapter's ``update_weights``. Without an adapter given, the worker hosts a rollout server of its own
(``rollout.name``) and loads the stream into it bucket by bucket (``RolloutServerWeightAdapter``).
"""

from __future__ import annotations

from typing import Any

from verl.checkpoint_engine.buckets import BucketPacker, megabytes_to_bytes
from verl.checkpoint_engine.manager import as_checkpoint_engine_config
from verl.checkpoint_engine.streaming import CheckpointEngine, CheckpointEngineRegistry, ensure_async_iterator
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register

__all__ = ["CheckpointEngineWorker", "RolloutServerWeightAdapter", "build_checkpoint_engine"]


def engine_bucket_bytes(engine_config: Any) -> int:
    """Bucket bound of ``rollout.checkpoint_engine`` (``bucket_megabytes``, verl's
    ``update_weights_bucket_megabytes``) in bytes."""
    return megabytes_to_bytes(as_checkpoint_engine_config(engine_config).bucket_megabytes)


def build_checkpoint_engine(engine_config: Any, **kwargs: Any) -> CheckpointEngine:
    """The streaming engine ``rollout.checkpoint_engine`` names, with its ``engine_kwargs[backend]``."""
    engine_config = as_checkpoint_engine_config(engine_config)
    backend = engine_config.backend
    engine_kwargs = {**(engine_config.engine_kwargs.get(backend) or {}), **kwargs}
    return CheckpointEngineRegistry.new(backend, bucket_size=engine_bucket_bytes(engine_config), **engine_kwargs)


class RolloutServerWeightAdapter:
    """verl's server-adapter ``update_weights(weights, global_steps=...)`` over one of this package's rollout servers:
    the stream is loaded in buckets of ``bucket_bytes``, each as one ``update_weights(bucket, version)`` call (the
    version is ``global_steps``)."""

    def __init__(self, server: Any, bucket_bytes: int, replica_rank: int = 0, is_leader_rank: bool = True) -> None:
        self.server = server
        self.bucket_bytes = bucket_bytes
        self.replica_rank = replica_rank
        self.is_leader_rank = is_leader_rank

    async def update_weights(
        self, weights: Any, global_steps: int | None = None, wire_format: str = "named_tensors", **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Load the stream; returns each bucket's load report (version and checksum)."""
        if wire_format != "named_tensors":
            raise ValueError(
                f"rollout server {type(self.server).__name__} loads full (name, tensor) pairs; the "
                f"checkpoint engine sends {wire_format!r}"
            )
        version = int(global_steps or 0)
        packer = BucketPacker(self.bucket_bytes)
        reports = []
        async for name, tensor in ensure_async_iterator(weights):
            for bucket in packer.add(name, tensor):
                reports.append(await self.server.update_weights(bucket, version))
        for bucket in packer.finish():
            reports.append(await self.server.update_weights(bucket, version))
        return reports


class CheckpointEngineWorker(Worker):
    """Receives weights through ``rollout.checkpoint_engine`` and loads them into the rollout server.

    Args:
        rollout_config: the ``rollout`` group (``checkpoint_engine``, ``name``...).
        model_config: the ``model`` group (where the server loads the model from when the worker hosts it).
        server_adapter: an object with ``async update_weights(weights, global_steps=..., **kwargs)``; None starts a
            rollout server in this process.
        *args, **kwargs: passed to the rollout server built when ``server_adapter`` is None.
    """

    def __init__(
        self, rollout_config: Any, model_config: Any, server_adapter: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        from verl.workers.rollout.base import as_model_config, as_rollout_config

        super().__init__()
        self.rollout_config = as_rollout_config(rollout_config)
        self.model_config = as_model_config(model_config)
        engine_config = self.rollout_config.checkpoint_engine
        self.checkpoint_engine: CheckpointEngine = build_checkpoint_engine(engine_config)
        self.server_adapter = (
            server_adapter
            if server_adapter is not None
            else self._host_server(engine_bucket_bytes(engine_config), *args, **kwargs)
        )

    def _host_server(self, bucket_bytes: int, *args: Any, **kwargs: Any) -> RolloutServerWeightAdapter:
        from verl.workers.fsdp.model_loader import resolve_model_path
        from verl.workers.rollout import build_server

        replica_rank = int(kwargs.pop("replica_rank", 0))
        server = build_server(self.rollout_config, resolve_model_path(self.model_config), *args, **kwargs)
        return RolloutServerWeightAdapter(
            server, bucket_bytes, replica_rank=replica_rank, is_leader_rank=self.rank == 0
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int | None = None) -> Any:
        """Receive one transfer and load it into the server."""
        weights = self.checkpoint_engine.receive_weights(global_steps=global_steps)
        return await self.server_adapter.update_weights(
            weights,
            global_steps=global_steps,
            wire_format=getattr(self.checkpoint_engine, "wire_format", "named_tensors"),
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE, blocking=False)
    def execute_checkpoint_engine(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` of this process's engine (``prepare``, ``init_process_group``, ``finalize``...)."""
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_replica_rank(self) -> int:
        return self.server_adapter.replica_rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def is_leader_rank(self) -> bool:
        return self.server_adapter.is_leader_rank
