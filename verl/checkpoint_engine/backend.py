"""The weight-sync backend contract: how one version of the trainer's weights reaches every rollout replica.

(verl's per-process streaming contract, ``CheckpointEngine``, is in :mod:`verl.checkpoint_engine.streaming`.)

A backend has two halves. ``sync`` runs on the driver (inside ``CheckpointEngineManager``): it prepares a
``WeightSyncRequest`` (a picklable description of where the weights go), asks every trainer rank to
``send_weights(request)``, and collects what each replica reports. ``send`` runs on each trainer rank, inside
the worker, with the live (possibly FSDP-sharded) module: every rank walks the same bucket iterator, because
gathering a sharded tensor is a collective, and rank 0 (or, for ``naive``, each rank's own engine) ships the
buckets.

Checksums: every bucket is loaded with one ``update_weights(bucket, version)`` call, which returns
``weight_checksum`` of what the replica loaded; the version's checksum is ``combine_bucket_checksums`` of those,
in bucket order. The trainer computes the same over the buckets it sent, so equal checksums prove the replica
runs exactly the bytes the trainer meant.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from verl.checkpoint_engine.buckets import iter_weight_buckets
from verl.utils.weight_checksum import weight_checksum

__all__ = [
    "WeightSyncBackend",
    "WeightSyncRequest",
    "register_checkpoint_engine",
    "get_checkpoint_engine_cls",
    "list_checkpoint_engines",
    "combine_bucket_checksums",
    "describe_error",
    "send_weights",
    "BucketLog",
]

_REGISTRY: dict[str, type[WeightSyncBackend]] = {}


def register_checkpoint_engine(name: str) -> Callable[[type[WeightSyncBackend]], type[WeightSyncBackend]]:
    """Class decorator: make a backend selectable as ``rollout.checkpoint_engine.backend=<name>``."""

    def decorator(cls: type[WeightSyncBackend]) -> type[WeightSyncBackend]:
        if not (isinstance(cls, type) and issubclass(cls, WeightSyncBackend)):
            raise TypeError(f"register_checkpoint_engine({name!r}): {cls!r} is not a WeightSyncBackend subclass")
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"checkpoint engine {name!r} is already registered to {existing.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def _load_builtin_backends() -> None:
    from verl.checkpoint_engine import collective, naive, ray_backend  # noqa: F401 - registration side effect


def get_checkpoint_engine_cls(name: str) -> type[WeightSyncBackend]:
    """The backend class registered as ``name``; an unknown name lists the known ones."""
    _load_builtin_backends()
    if name not in _REGISTRY:
        raise ValueError(
            f"rollout.checkpoint_engine.backend={name!r} is not a known checkpoint engine; "
            f"known: {', '.join(list_checkpoint_engines())}"
        )
    return _REGISTRY[name]


def list_checkpoint_engines() -> list[str]:
    _load_builtin_backends()
    return sorted(_REGISTRY)


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of the original error: a Ray task error is unwrapped to the exception the replica raised."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip()
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return described + _dead_actor_node(exc)


def _dead_actor_node(exc: BaseException) -> str:
    """`` (replica process on node <id> ...)`` for a replica whose actor is gone: the node is the likely culprit."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:  # pragma: no cover - ray is a dependency
        return ""
    actor_id = getattr(exc, "actor_id", None) if isinstance(exc, RayActorError) else None
    if not actor_id:
        return ""
    from verl.single_controller.ray.node_placement import describe_node, node_of_actor

    node_id = node_of_actor(actor_id if isinstance(actor_id, str) else actor_id.hex())
    return f" (replica process on {describe_node(node_id)})" if node_id else ""


def combine_bucket_checksums(bucket_checksums: Iterable[str]) -> str:
    """One digest for a whole version from the per-bucket checksums, in bucket order."""
    digest = hashlib.blake2b(digest_size=16)
    for i, checksum in enumerate(bucket_checksums):
        digest.update(f"{i}:{checksum};".encode())
    return digest.hexdigest()


@dataclass
class BucketLog:
    """What one side saw of a version: per-bucket checksums and payload size."""

    checksums: list[str] = field(default_factory=list)
    nbytes: int = 0

    def add(self, bucket: list[tuple[str, torch.Tensor]]) -> str:
        checksum = weight_checksum(bucket)
        self.checksums.append(checksum)
        self.nbytes += sum(t.numel() * t.element_size() for _, t in bucket)
        return checksum

    @property
    def checksum(self) -> str:
        return combine_bucket_checksums(self.checksums)


@dataclass
class WeightSyncRequest:
    """Everything a trainer rank needs to send one version (picklable; travels to the workers).

    ``targets`` is backend specific: replica actor handles (``ray``), the rendezvous of the broadcast group
    (``collective``), nothing (``naive``: the engine lives in the worker).
    """

    backend: str
    version: int
    bucket_bytes: int
    dtype: str | None = None
    timeout_s: float = 600.0
    targets: Any = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def torch_dtype(self) -> torch.dtype | None:
        return None if self.dtype is None else getattr(torch, str(self.dtype).removeprefix("torch."))

    def buckets(self, module: nn.Module | Iterable[tuple[str, torch.Tensor]], device: str | None = "cpu"):
        return iter_weight_buckets(module, self.bucket_bytes, self.torch_dtype, device)


class WeightSyncBackend(abc.ABC):
    """One weight-transfer backend. Subclasses register with ``@register_checkpoint_engine(name)``."""

    name: str = "?"

    def __init__(
        self, bucket_bytes: int, dtype: str | torch.dtype | None = None, timeout_s: float = 600.0, **options: Any
    ) -> None:
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(
                f"checkpoint engine {self.name!r}: bucket_bytes must be a positive int, got {bucket_bytes!r}"
            )
        if timeout_s <= 0:
            raise ValueError(f"rollout.checkpoint_engine.timeout_s must be > 0, got {timeout_s!r}")
        self.bucket_bytes = bucket_bytes
        self.dtype = None if dtype is None else str(dtype).removeprefix("torch.")
        if self.dtype is not None and not isinstance(getattr(torch, self.dtype, None), torch.dtype):
            raise ValueError(f"checkpoint engine {self.name!r}: dtype={dtype!r} is not a torch dtype (e.g. bfloat16)")
        self.timeout_s = float(timeout_s)
        self.options = options

    def make_request(self, version: int, targets: Any = None) -> WeightSyncRequest:
        return WeightSyncRequest(
            self.name, int(version), self.bucket_bytes, self.dtype, self.timeout_s, targets, dict(self.options)
        )

    @abc.abstractmethod
    def sync(
        self, call_trainer: Callable[[WeightSyncRequest], list[Any]], replicas: dict[str, Any], version: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Driver side: push ``version`` and return ``(trainer_report, {replica name: replica_report})``.

        ``call_trainer(request)`` runs ``send_weights`` on every trainer rank and returns the per-rank results.
        A trainer report has ``checksum``, ``num_buckets``, ``bytes``; a replica report has ``version`` and
        ``checksum``, or ``error`` (a message) when that replica failed.
        """

    @classmethod
    @abc.abstractmethod
    def send(
        cls,
        module: nn.Module,
        request: WeightSyncRequest,
        rank: int,
        local_replicas: list[Any] | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> dict[str, Any] | None:
        """Trainer side, on every rank: walk the buckets and ship them; rank 0 returns its report."""


def send_weights(
    module: nn.Module,
    request: WeightSyncRequest,
    *,
    rank: int | None = None,
    local_replicas: list[Any] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> dict[str, Any] | None:
    """Worker-side entry point: call it from a worker method registered with ``Dispatch.ONE_TO_ALL`` on every rank.

    Args:
        module: the trainer's model (FSDP2-sharded or not; peft LoRA is merged on the fly).
        request: what ``CheckpointEngineManager`` sent.
        rank: this worker's rank in the trainer group (default: torch.distributed rank, else 0).
        local_replicas: rollout replicas/servers living in this process (hybrid engine), needed by ``naive``.
        loop: the running event loop that owns those replicas (their async methods are submitted to it);
            None runs them on a private loop for the duration of the call.
    """
    if rank is None:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    cls = get_checkpoint_engine_cls(request.backend)
    return cls.send(module, request, int(rank), local_replicas, loop)
