"""Replicas: where a rollout server lives, behind the same async interface (``RolloutReplica``).

- in the caller's process: the ``RolloutServer`` itself (the actor worker in the colocated "hybrid engine"
  layout); weight updates are in-place copies with no serialisation. :func:`build_server` makes one.
- ``StandaloneReplica``: the server class is itself a Ray actor on the rollout resource pool (a placement
  group bundle or plain Ray options); every call is a remote call with a timeout, and the ``generate`` calls made
  in one turn of the caller's event loop share one remote call (:mod:`verl.workers.rollout.request_batching`).
- ``WorkerRankReplica``: the server lives in one rank of a hybrid actor/rollout worker group (another process);
  calls go to that rank's actor handle, with the same timeouts and coalescing (:func:`worker_rank_replicas`).

All three carry the ``RolloutReplica`` contract unchanged, so callers never care which one they hold. Each says where
its server lives through ``rollout_mode`` (verl's :class:`RolloutMode`). :func:`get_rollout_replica_class` gives
verl's per-engine replica class, built as ``cls(replica_rank, config, model_config, gpus_per_node)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import torch

from verl.utils.async_utils import await_ray
from verl.workers.rollout.base import RolloutMode, RolloutReplica, RolloutServer, TokenOutput, as_rollout_config
from verl.workers.rollout.registry import get_rollout_class
from verl.workers.rollout.request_batching import (
    Request,
    RequestCoalescer,
    call_batch_method,
)

__all__ = [
    "RolloutMode",
    "RolloutReplica",
    "RemoteReplica",
    "StandaloneReplica",
    "WorkerRankReplica",
    "standalone_replicas",
    "worker_rank_replicas",
    "TokenOutput",
    "build_server",
    "get_rollout_replica_class",
    "server_class",
]


_CUSTOM_KEY = "rollout.agent.custom_async_server"


def server_class(config: Any, name: str | None = None) -> type[RolloutServer]:
    """The server class of ``config``: ``rollout.agent.custom_async_server`` (a ``RolloutServer`` subclass in a .py
    file or module) when its ``path`` is set, else the class registered for ``name`` (default ``config.name``)."""
    config = as_rollout_config(config)
    custom = config.agent.custom_async_server
    if not custom.path:
        return get_rollout_class(name or config.name)
    from verl.utils.import_utils import load_extern_object

    cls = load_extern_object(custom.path, custom.name, config_key=f"{_CUSTOM_KEY}.path", what="rollout server class")
    if not (isinstance(cls, type) and issubclass(cls, RolloutServer)):
        raise TypeError(
            f"{_CUSTOM_KEY}.name={custom.name!r} in {custom.path!r} must be a subclass of "
            f"verl.workers.rollout.base.RolloutServer, got {cls!r}"
        )
    return cls


def build_server(
    config: Any, model_path: str | None = None, *, name: str | None = None, **kwargs: Any
) -> RolloutServer:
    """Instantiate :func:`server_class` of ``config``: ``cls(config, model_path, **kwargs)`` (hybrid engines get
    the actor's live module as ``model=``)."""
    config = as_rollout_config(config)
    return server_class(config, name)(config, model_path, **kwargs)


# The roles a dead replica is named by (first words of its WorkerDiedError): "rollout replica rank 1 died during
# generate() on node ..., pid ...".
REPLICA_ROLE = "rollout replica"
HYBRID_REPLICA_ROLE = "hybrid rollout replica"


def _died(err: Exception, *, role: str, index: int, method: str, actor: Any) -> Exception:
    """``err`` as the WorkerDiedError of replica ``index`` when Ray says its actor is gone, else ``err`` itself."""
    from ray.exceptions import RayActorError

    from verl.single_controller.ray.errors import actor_died_error

    if not isinstance(err, RayActorError):
        return err
    return actor_died_error(err, role=role, index=index, method=method, actor=actor)


class RemoteReplica(RolloutReplica):
    """The contract carried over Ray to an actor that serves it (a transport's shared half).

    Every call is a remote call bounded by ``call_timeout_s``; with ``coalesce`` the ``generate`` calls made in one
    turn of the caller's event loop travel together in one ``generate_batch`` call (each caller still gets its own
    result or exception). Subclasses say which actor method serves a contract method (:meth:`_remote_method`), how a
    call is named in a timeout (:meth:`_label`) and what a failure becomes (:meth:`_failure`).
    """

    call_timeout_s: float = 600.0
    coalesce: bool = True

    def _remote_method(self, method: str) -> Any:
        raise NotImplementedError

    def _label(self, method: str) -> str:
        raise NotImplementedError

    def _failure(self, err: Exception, method: str) -> Exception:
        return err

    def _reraise(self, err: Exception, method: str) -> NoReturn:
        """Raise what ``err`` becomes (:meth:`_failure`), chained to it; ``err`` itself when it stays as it is."""
        failure = self._failure(err, method)
        if failure is err:
            raise err
        raise failure from err

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_coalescer"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def _requests(self) -> RequestCoalescer:
        coalescer = self.__dict__.get("_coalescer")
        if coalescer is None:
            coalescer = self._coalescer = RequestCoalescer()
        return coalescer

    @property
    def batch_sizes(self) -> Any:
        """Requests per recent ``generate_batch`` call (a deque)."""
        return self._requests.batch_sizes

    async def _call(self, method: str, *args: Any) -> Any:
        ref = self._remote_method(method).remote(*args)
        try:
            return await await_ray(ref, self.call_timeout_s, self._label(method))
        except Exception as err:
            self._reraise(err, method)

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        request = (list(prompt_ids), dict(sampling_params or {}), request_id)
        if not self.coalesce:
            return await self._call("generate", *request)
        return await self._requests.submit(request, self._send_batch)

    async def _send_batch(self, requests: list[Request]) -> list[Any]:
        method = self._remote_method("generate_batch")
        try:
            return await call_batch_method(method, requests, self.call_timeout_s, self._label("generate"))
        except Exception as err:
            self._reraise(err, "generate")

    async def abort_all(self) -> None:
        await self._call("abort_all")

    async def resume(self) -> None:
        await self._call("resume")

    async def pause_generation(self) -> None:
        """Hold decoding between two steps, keeping the requests (``async_training.keep_requests_through_sync``);
        only servers that define it (the hf engine) answer."""
        await self._call("pause_generation")

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        items = named_tensors.items() if isinstance(named_tensors, dict) else named_tensors
        return await self._call("update_weights", [(n, t.detach().cpu()) for n, t in items], version)

    async def sleep(self) -> None:
        await self._call("sleep")

    async def wake_up(self) -> None:
        await self._call("wake_up")

    async def get_version(self) -> int:
        return int(await self._call("get_version"))


class StandaloneReplica(RemoteReplica):
    """The server is a Ray actor of its own, placed on a placement-group bundle or by plain Ray options.

    Args:
        config: the rollout config (pickled to the actor).
        model_path: Hugging Face folder the actor loads.
        name: engine name (default ``config.name``).
        placement_group / bundle_index: where to place the actor on the rollout pool.
        num_cpus / num_gpus: the actor's resource request.
        ray_options: extra ``.options(...)`` for the actor (override the above).
        server_kwargs: extra keyword arguments of the server class.
        call_timeout_s: limit on every remote call; a timeout names the replica and the method.
        replica_rank: the replica's index in its pool; a replica whose process (or node) died is reported as
            ``rollout`` rank ``replica_rank``, with the node it ran on.
    """

    rollout_mode = RolloutMode.STANDALONE

    def __init__(
        self,
        config: Any,
        model_path: str | None,
        *,
        name: str | None = None,
        placement_group: Any = None,
        bundle_index: int = 0,
        num_cpus: float = 1,
        num_gpus: float = 0,
        ray_options: dict[str, Any] | None = None,
        server_kwargs: dict[str, Any] | None = None,
        call_timeout_s: float = 600.0,
        replica_rank: int = 0,
    ):
        import ray

        config = as_rollout_config(config)
        self.name = name or config.name
        self.replica_rank = int(replica_rank)
        # resolved here, on the driver: a missing engine or custom class fails now (a class from a file travels by
        # value); the server itself is the actor
        cls = server_class(config, self.name)
        options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_concurrency": 1000}
        if placement_group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=bundle_index
            )
        options.update(ray_options or {})
        self.call_timeout_s = call_timeout_s
        self.actor = ray.remote(cls).options(**options).remote(config, model_path, **dict(server_kwargs or {}))

    def _remote_method(self, method: str) -> Any:
        return getattr(self.actor, method)

    def _label(self, method: str) -> str:
        return f"rollout replica {self.name!r} {method}"

    def _failure(self, err: Exception, method: str) -> Exception:
        """``err`` as a WorkerDiedError naming role ``rollout replica``, this replica's rank, its node, its pid and
        the call when the actor is gone; any other error as it is."""
        return _died(err, role=REPLICA_ROLE, index=self.replica_rank, method=method, actor=self.actor)

    def kill(self) -> None:
        """Stop the actor (its in-flight requests fail on the caller's side)."""
        import ray

        ray.kill(self.actor)


def standalone_replicas(
    config: Any,
    model_path: str | None,
    pool: Any,
    *,
    slots: list[tuple[Any, int]] | None = None,
    server_kwargs: dict[str, Any] | None = None,
    call_timeout_s: float = 600.0,
) -> list[StandaloneReplica]:
    """One :class:`StandaloneReplica` per process slot of ``pool`` (a RayResourcePool, or a slice of one), placed on
    its bundle and numbered by slot (the rank a dead replica is reported under). ``slots``: the pool's
    ``bundle_slots()`` when the caller has them already."""
    resources = pool.actor_resources()
    return [
        StandaloneReplica(
            config,
            model_path,
            placement_group=pg,
            bundle_index=bundle,
            num_cpus=resources.get("num_cpus", 1),
            num_gpus=resources.get("num_gpus", 0),
            server_kwargs=dict(server_kwargs or {}),
            call_timeout_s=call_timeout_s,
            replica_rank=rank,
        )
        for rank, (pg, bundle) in enumerate(pool.bundle_slots() if slots is None else slots)
    ]


# The RolloutServer contract as a rank of ActorRolloutRefWorker serves it: contract method -> the worker's method.
WORKER_RANK_METHODS = {
    "generate": "rollout_generate",
    "generate_batch": "rollout_generate_batch",
    "abort_all": "abort_all",
    "resume": "resume",
    "update_weights": "update_weights",
    "sleep": "sleep",
    "wake_up": "wake_up",
    "get_version": "get_version",
}


class WorkerRankReplica(RemoteReplica):
    """One rank of a hybrid actor/rollout worker group, seen as a rollout replica (picklable: it holds an actor
    handle).

    Args:
        handle: the rank's actor handle.
        rank: its rank (named by timeouts).
        method_names: contract method -> actor-side method name (colocated groups prefix the worker's methods
            with the role); default :data:`WORKER_RANK_METHODS`.
        call_timeout_s: limit on every remote call.
        coalesce: send the ``generate`` calls made in one turn of the caller's event loop together, in one
            ``rollout_generate_batch`` call; False sends one Ray call per request.
    """

    rollout_mode = RolloutMode.HYBRID

    def __init__(
        self,
        handle: Any,
        rank: int,
        method_names: Mapping[str, str] | None = None,
        call_timeout_s: float = 3600.0,
        coalesce: bool = True,
    ) -> None:
        self.handle = handle
        self.rank = int(rank)
        self.method_names = dict(method_names or WORKER_RANK_METHODS)
        self.call_timeout_s = float(call_timeout_s)
        self.coalesce = coalesce

    def _remote_method(self, method: str) -> Any:
        return getattr(self.handle, self.method_names[method])

    def _label(self, method: str) -> str:
        return f"hybrid rollout rank {self.rank}: {method}"

    def _failure(self, err: Exception, method: str) -> Exception:
        """``err`` as a WorkerDiedError naming role ``hybrid rollout replica``, the rank, its node, its pid and
        the call when the rank's actor is gone; any other error as it is."""
        return _died(err, role=HYBRID_REPLICA_ROLE, index=self.rank, method=method, actor=self.handle)

    def __repr__(self) -> str:
        return f"WorkerRankReplica(rank={self.rank})"


def worker_rank_replicas(worker_group: Any, call_timeout_s: float = 3600.0) -> list[WorkerRankReplica]:
    """One :class:`WorkerRankReplica` per rank of a hybrid actor/rollout worker group.

    Raises TypeError naming the group's role when its worker class does not serve the contract.
    """
    bound = worker_group.bound_methods
    missing = [method for method in WORKER_RANK_METHODS.values() if method not in bound]
    if missing:
        role = getattr(worker_group, "role", type(worker_group).__name__)
        raise TypeError(
            f"worker group {role!r} has no {', '.join(repr(m) for m in missing)} method: the agent loop uses the "
            "engines of a hybrid group whose worker class is verl.workers.fsdp_workers.ActorRolloutRefWorker (or a "
            "subclass) with a rollout role; for a rollout of its own give AgentLoopManager.create a "
            "rollout_resource_pool (standalone mode)"
        )
    names = {contract: bound[method] for contract, method in WORKER_RANK_METHODS.items()}
    return [WorkerRankReplica(handle, rank, names, call_timeout_s) for rank, handle in enumerate(worker_group.workers)]


# rollout.name -> "module:class" of its replica class, built from verl's (replica_rank, config, model_config, ...)
_REPLICA_CLASSES = {
    "hf": "verl.workers.rollout.hf.replica:HFReplica",
    "vllm": "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMReplica",
    "sglang": "verl.workers.rollout.sglang_rollout.async_sglang_server:SGLangReplica",
}


def get_rollout_replica_class(rollout: str, disaggregation_enabled: bool = False) -> type[RolloutReplica]:
    """verl's replica class of engine ``rollout`` (``rollout.name``): each is a :class:`StandaloneReplica` taking
    ``(replica_rank, config, model_config, gpus_per_node=8, ...)``. vLLM and SGLang raise ``MissingExtraError`` when
    built without their package. ``disaggregation_enabled`` (prefill/decode on separate replicas) and ``trtllm`` are
    refused with ``MissingExtraError``: no engine here provides them."""
    from verl.utils.extras import MissingExtraError

    if disaggregation_enabled:
        raise MissingExtraError(
            f"get_rollout_replica_class({rollout!r}, disaggregation_enabled=True): prefill/decode disaggregation is "
            "not part of this build; set rollout.disaggregation.enabled=false"
        )
    if rollout == "trtllm":
        raise MissingExtraError(
            "rollout.name='trtllm': verl's TensorRT-LLM replica is not part of this build; use "
            f"one of {sorted(_REPLICA_CLASSES)}"
        )
    target = _REPLICA_CLASSES.get(rollout)
    if target is None:
        raise ValueError(f"rollout.name={rollout!r} has no replica class; known: {sorted(_REPLICA_CLASSES)}")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
