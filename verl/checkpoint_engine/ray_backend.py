"""``ray``: trainer rank 0 puts each bucket in the Ray object store once; every replica actor fetches and loads it.

One ``ray.put`` per bucket, whatever the number of replicas, with the tensor bytes out of band
(``OutOfBandBucket``: written straight into the object store, not through torch's in-band pickle). The replica
actors receive the object reference as a top-level argument of their ``update_weights`` method, so Ray hands them
the tensors directly (the driver never touches the bytes). At most ``max_inflight_buckets`` buckets are
outstanding, which bounds the object-store memory a weight update needs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from torch import nn

from verl.checkpoint_engine.backend import (
    BucketLog,
    WeightSyncBackend,
    WeightSyncRequest,
    describe_error,
    register_checkpoint_engine,
)
from verl.checkpoint_engine.buckets import OutOfBandBucket

__all__ = ["RayCheckpointEngine", "replica_actor"]

DEFAULT_MAX_INFLIGHT_BUCKETS = 2


def replica_actor(name: str, replica: Any) -> Any:
    """The Ray actor behind a replica (a ``StandaloneReplica`` or a bare actor handle); an error names the replica."""
    import ray

    if isinstance(replica, ray.actor.ActorHandle):
        return replica
    actor = getattr(replica, "actor", None)
    if isinstance(actor, ray.actor.ActorHandle):
        return actor
    raise TypeError(
        f"checkpoint engine: replica {name!r} ({type(replica).__name__}) is not a Ray actor; backends 'ray' and "
        "'collective' need standalone replicas, use 'naive' for engines inside the trainer process"
    )


@register_checkpoint_engine("ray")
class RayCheckpointEngine(WeightSyncBackend):
    """Object-store transfer; options: ``max_inflight_buckets`` (default 2)."""

    def sync(
        self, call_trainer: Callable[[WeightSyncRequest], list[Any]], replicas: dict[str, Any], version: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        if not replicas:
            raise ValueError("checkpoint engine 'ray': no replicas to update")
        targets = {name: replica_actor(name, replica) for name, replica in replicas.items()}
        reports = call_trainer(self.make_request(version, targets))
        trainer = next((r for r in reports if r is not None), None)
        if trainer is None:
            raise RuntimeError("checkpoint engine 'ray': trainer rank 0 returned no report")
        return trainer, trainer["replicas"]

    @classmethod
    def send(
        cls,
        module: nn.Module,
        request: WeightSyncRequest,
        rank: int,
        local_replicas: list[Any] | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> dict[str, Any] | None:
        if rank != 0:
            for _ in request.buckets(module):  # take part in the gathers; rank 0 ships
                pass
            return None
        import ray

        max_inflight = int(request.options.get("max_inflight_buckets", DEFAULT_MAX_INFLIGHT_BUCKETS))
        if max_inflight < 1:
            raise ValueError(f"checkpoint engine 'ray': max_inflight_buckets must be >= 1, got {max_inflight}")
        targets: dict[str, Any] = request.targets
        logs = {name: BucketLog() for name in targets}
        errors: dict[str, str] = {}
        sent = BucketLog()
        inflight: deque[list[tuple[str, Any]]] = deque()

        def settle_oldest() -> None:
            for name, ref in inflight.popleft():
                if name in errors:
                    continue
                try:
                    result = ray.get(ref, timeout=request.timeout_s)
                    logs[name].checksums.append(str(result["checksum"]))
                except Exception as exc:  # noqa: BLE001 - one replica's failure must not stop the others
                    errors[name] = describe_error(exc)

        for bucket in request.buckets(module):
            sent.add(bucket)
            while len(inflight) >= max_inflight:
                settle_oldest()
            ref = ray.put(OutOfBandBucket(bucket))
            inflight.append(
                [
                    (name, actor.update_weights.remote(ref, request.version))
                    for name, actor in targets.items()
                    if name not in errors
                ]
            )
            del ref
        while inflight:
            settle_oldest()
        replicas = {
            name: {"error": errors[name]} if name in errors else {"version": request.version, "checksum": log.checksum}
            for name, log in logs.items()
        }
        return {
            "rank": rank,
            "checksum": sent.checksum,
            "num_buckets": len(sent.checksums),
            "bytes": sent.nbytes,
            "replicas": replicas,
        }
