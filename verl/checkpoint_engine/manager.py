"""``CheckpointEngineManager``: the trainers' one call to publish a new weight version to every rollout replica.

It picks the backend by name, runs it, and refuses to return unless every replica reports the version and the
trainer's checksum: a replica silently serving other weights would corrupt the off-policy bookkeeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from verl.checkpoint_engine.backend import WeightSyncRequest, get_checkpoint_engine_cls
from verl.checkpoint_engine.buckets import megabytes_to_bytes
from verl.utils.ray_utils import auto_await

if TYPE_CHECKING:
    from verl.workers.config import CheckpointEngineConfig

__all__ = ["CheckpointEngineManager", "WeightSyncError", "as_checkpoint_engine_config", "call_trainer_ranks"]


def as_checkpoint_engine_config(config: Any) -> CheckpointEngineConfig:
    """``rollout.checkpoint_engine`` as a typed ``CheckpointEngineConfig``, built once from an OmegaConf node, a
    mapping or a ``SimpleNamespace`` when it is not one; verl's ``update_weights_bucket_megabytes`` key is read as
    ``bucket_megabytes``."""
    from omegaconf import DictConfig, OmegaConf

    from verl.utils.config_builder import as_config
    from verl.workers.config import CheckpointEngineConfig

    if isinstance(config, CheckpointEngineConfig):
        return config
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    elif isinstance(config, SimpleNamespace):
        config = vars(config)
    if isinstance(config, Mapping) and "update_weights_bucket_megabytes" in config:
        config = dict(config)
        megabytes = config.pop("update_weights_bucket_megabytes")
        if megabytes is not None:
            config.setdefault("bucket_megabytes", megabytes)
    return as_config(config, CheckpointEngineConfig, "rollout.checkpoint_engine")


class WeightSyncError(RuntimeError):
    """One or more replicas failed to load a version or loaded different bytes; ``failures`` maps name -> reason.
    ``lost_replicas`` names those whose process (or node) is gone: a restart can help there, not elsewhere."""

    def __init__(self, message: str, failures: dict[str, str], lost_actor_ids: Sequence[str] = ()):
        super().__init__(message)
        self.failures = failures
        self.lost_replicas = sorted(name for name, why in failures.items() if _names_a_dead_actor(why))
        self.lost_actor_ids = list(lost_actor_ids)  # of the lost replicas: a restart waits until they are marked dead

    def __reduce__(self) -> tuple[Any, ...]:  # every argument: Ray re-creates it on the caller's side
        return (type(self), (str(self), self.failures, self.lost_actor_ids))


def _actor_id(replica: Any) -> str | None:
    """The Ray actor id (hex) behind a replica, when it is one."""
    handle = getattr(replica, "actor", replica)
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else None


def _names_a_dead_actor(reason: str) -> bool:
    """Whether a failure reason (``failed: Type: message`` from ``describe_error``) is a Ray actor death."""
    import ray.exceptions

    dead = {
        name
        for name, cls in vars(ray.exceptions).items()
        if isinstance(cls, type) and issubclass(cls, ray.exceptions.RayActorError | ray.exceptions.NodeDiedError)
    }
    kind = reason.removeprefix("failed: ").split(":", 1)[0].strip()
    return kind in dead


def call_trainer_ranks(trainer: Any, request: WeightSyncRequest, timeout_s: float) -> list[Any]:
    """Run ``send_weights(request)`` on every trainer rank and return the per-rank results.

    ``trainer`` may be a worker group (its ``send_weights`` is registered ``Dispatch.ONE_TO_ALL`` and returns a
    list), a Ray actor handle, a list of actor handles, or a plain object in this process.
    """
    import ray

    handles = trainer if isinstance(trainer, (list, tuple)) else [trainer]
    if all(isinstance(h, ray.actor.ActorHandle) for h in handles):
        results: Any = [h.send_weights.remote(request) for h in handles]
    else:
        method = getattr(trainer, "send_weights", None)
        if method is None:
            raise TypeError(
                f"checkpoint engine: trainer {type(trainer).__name__} has no send_weights(request) method; expose "
                "one that calls verl.checkpoint_engine.send_weights on every rank"
            )
        results = method(request)
    if not isinstance(results, list):
        results = [results]
    refs = [i for i, r in enumerate(results) if isinstance(r, ray.ObjectRef)]
    if refs:
        fetched = ray.get([results[i] for i in refs], timeout=timeout_s)
        for i, value in zip(refs, fetched):
            results[i] = value
    return results


class CheckpointEngineManager:
    """Push trainer weights to rollout replicas through one checkpoint-engine backend.

    Args:
        backend: ``naive`` | ``ray`` | ``collective`` (or any registered name); or, as in verl, the
            ``rollout.checkpoint_engine`` config itself (its backend, bucket size and timeout are read; see
            :func:`as_checkpoint_engine_config`).
        trainer: what holds the weights: a worker group / actor handle(s) / object exposing ``send_weights``
            (verl's name for it, ``actor_wg``, is accepted as a keyword).
        replicas: standalone replicas (list -> named ``replica0``..., or a name -> replica mapping); none for
            ``naive``, whose engines live inside the trainer workers.
        bucket_megabytes: the bound on one bucket (None: the config's, or ``CheckpointEngineConfig``'s default).
        dtype: cast weights to the rollout's dtype before sending (and hash in it); None keeps the trainer's.
        timeout_s: limit on every wait of an update (None: the config's, or ``CheckpointEngineConfig``'s default).
        **options: backend options (``max_inflight_buckets`` for ray, ``device`` for collective).
    """

    def __init__(
        self,
        backend: Any = None,
        trainer: Any = None,
        replicas: Sequence[Any] | Mapping[str, Any] | None = None,
        bucket_megabytes: float | None = None,
        dtype: str | torch.dtype | None = None,
        timeout_s: float | None = None,
        *,
        config: Any = None,
        actor_wg: Any = None,
        **options: Any,
    ) -> None:
        config = config if config is not None else (None if isinstance(backend, str) else backend)
        if config is None and not isinstance(backend, str):
            raise TypeError(
                f"CheckpointEngineManager: backend must be a backend name or the checkpoint_engine "
                f"config, got {type(backend).__name__}"
            )
        engine_config = as_checkpoint_engine_config({} if config is None else config)
        if config is not None:
            config = engine_config
            backend = engine_config.backend
        if bucket_megabytes is None:
            bucket_megabytes = engine_config.bucket_megabytes
        if timeout_s is None:
            timeout_s = engine_config.timeout_s
        if trainer is None:
            trainer = actor_wg
        if trainer is None:
            raise ValueError("CheckpointEngineManager needs the trainer (actor_wg) that holds the weights")
        engine_cls = get_checkpoint_engine_cls(backend)
        self.backend = backend
        self.config = config
        self.trainer = trainer
        self.replicas: dict[str, Any] = {}
        if isinstance(replicas, Mapping):
            self.replicas = dict(replicas)
        elif replicas is not None:
            self.add_replicas(list(replicas))
        self.engine = engine_cls(megabytes_to_bytes(bucket_megabytes), dtype=dtype, timeout_s=timeout_s, **options)
        self.last_metrics: dict[str, float] = {}

    @property
    def actor_wg(self) -> Any:
        """verl's name for the trainer side."""
        return self.trainer

    # -- replicas (verl's elastic-scaling helpers) -----------------------------------------------------------------
    def add_replicas(self, replicas: Sequence[Any]) -> None:
        """Include more replicas in the next updates (named ``replica<i>`` in order of arrival)."""
        start = len(self.replicas)
        for offset, replica in enumerate(replicas):
            name = f"replica{start + offset}"
            while name in self.replicas:
                name += "_"
            self.replicas[name] = replica

    def remove_replicas(self, replicas: Sequence[Any]) -> None:
        """Stop updating these replicas (matched by identity)."""
        gone = {id(r) for r in replicas}
        self.replicas = {name: r for name, r in self.replicas.items() if id(r) not in gone}

    async def _on_replicas(self, method: str) -> None:
        await asyncio.gather(*(getattr(replica, method)() for replica in self.replicas.values()))

    @auto_await
    async def sleep_replicas(self) -> None:
        """Free every replica's weights and KV cache memory."""
        await self._on_replicas("sleep")

    @auto_await
    async def wake_up_replicas(self) -> None:
        """Bring every replica's memory back."""
        await self._on_replicas("wake_up")

    @auto_await
    async def abort_replicas(self, reject_request: bool = False) -> None:
        """Abort in-flight requests on every replica (they are resumed by ``resume_generation_replicas``)."""
        if reject_request:
            raise ValueError(
                "abort_replicas(reject_request=True): the rollout servers park requests arriving while "
                "paused; they cannot reject them"
            )
        await self._on_replicas("abort_all")

    @auto_await
    async def resume_generation_replicas(self) -> None:
        await self._on_replicas("resume")

    @classmethod
    def from_config(
        cls,
        rollout_config: Any,
        trainer: Any,
        replicas: Sequence[Any] | Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> CheckpointEngineManager:
        """Build from the ``rollout`` config (built into a ``RolloutConfig``): ``checkpoint_engine.backend``,
        ``checkpoint_engine.bucket_megabytes`` and ``checkpoint_engine.timeout_s``; ``overrides`` win."""
        from verl.workers.rollout.base import as_rollout_config

        engine_cfg = as_rollout_config(rollout_config).checkpoint_engine
        kwargs: dict[str, Any] = {
            "backend": engine_cfg.backend,
            "bucket_megabytes": engine_cfg.bucket_megabytes,
            "timeout_s": engine_cfg.timeout_s,
        }
        kwargs.update(overrides)
        return cls(trainer=trainer, replicas=replicas, **kwargs)

    @auto_await
    async def update_weights(self, version: int | None = None, global_steps: int | None = None) -> dict[str, Any]:
        """Publish ``version`` (verl's keyword: ``global_steps``); return
        ``{version, checksum, replicas: {name: {version, checksum}}, metrics}``.

        Callable from plain code (blocks until done) or awaited (runs off the event loop).

        Raises:
            WeightSyncError: a replica failed, reported another version, or a checksum differs from the
                trainer's; every such replica is named with its reason.
        """
        return await asyncio.to_thread(self._publish, global_steps if version is None else version)

    def _publish(self, version: int) -> dict[str, Any]:
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"update_weights: version must be an int, got {version!r}")
        start = time.perf_counter()
        trainer, replicas = self.engine.sync(
            lambda request: call_trainer_ranks(self.trainer, request, self.engine.timeout_s), self.replicas, version
        )
        elapsed = time.perf_counter() - start
        expected = trainer["checksum"]
        failures: dict[str, str] = {}
        for name, report in replicas.items():
            if report.get("error"):
                failures[name] = f"failed: {report['error']}"
            elif report.get("version") != version:
                failures[name] = f"reports version {report.get('version')!r}, expected {version}"
            elif report.get("checksum") != expected:
                failures[name] = (
                    f"checksum {report.get('checksum')} differs from the trainer's {expected} (it loaded other bytes: "
                    "a dtype differing from the checkpoint engine's dtype, or a different model)"
                )
        if failures:
            detail = "; ".join(f"replica {name!r} {why}" for name, why in failures.items())
            error = WeightSyncError(f"checkpoint engine {self.backend!r}, version {version}: {detail}", failures)
            ids = [_actor_id(self.replicas.get(name)) for name in error.lost_replicas]
            error.lost_actor_ids = [actor_id for actor_id in ids if actor_id]
            raise error
        self.last_metrics = {
            "timing_s/update_weights": elapsed,
            "checkpoint_engine/num_buckets": float(trainer.get("num_buckets", 0)),
            "checkpoint_engine/megabytes": trainer.get("bytes", 0) / (1 << 20),
        }
        return {
            "version": version,
            "checksum": expected,
            "replicas": {n: {"version": r["version"], "checksum": r["checksum"]} for n, r in replicas.items()},
            "metrics": dict(self.last_metrics),
        }

    async def update_weights_async(self, version: int | None = None, global_steps: int | None = None) -> dict[str, Any]:
        """``update_weights`` off the event loop (it blocks on trainer and replica calls)."""
        return await asyncio.to_thread(self._publish, global_steps if version is None else version)
