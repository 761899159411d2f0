"""AgentLoopManager: every rollout goes through here, synchronous trainer or not.

``await AgentLoopManager.create(config, worker_group=None, rollout_resource_pool=None, ...)`` finds or starts the
rollout replicas and ``rollout.agent.num_workers`` :class:`AgentLoopWorker` actors:

- hybrid (``worker_group`` given): the replicas are the engines inside the actor workers, one
  ``WorkerRankReplica`` per rank; the manager wakes them before a batch and puts them to sleep after it
  (``rollout.free_cache_engine``), since they share the device with training.
- standalone: one ``StandaloneReplica`` actor per slot of ``rollout_resource_pool``, or ``rollout.nnodes *
  rollout.n_gpus_per_node`` actors placed by Ray, or the ``replicas`` given.

``generate_sequences(batch)`` (blocking) / ``await generate_sequences_async(batch)`` split the batch over the
workers (contiguous shards, order kept) and concatenate their outputs into one DataProto (layout in
:mod:`verl.experimental.agent_loop.postprocess`), with the per-sample counters and times summarized under
``meta_info['metrics']['agent_loop/...']``.

Only the flattened ``rollout``, ``model``, ``data`` and ``reward`` groups are read. A custom manager class is
chosen by ``rollout.agent.agent_loop_manager_class`` (``package.module.Class`` or ``file.py:Class``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import numpy as np

from verl.experimental.agent_loop.concurrency import MAX_IN_FLIGHT_KEY, PEAK_IN_FLIGHT_KEY, share_of
from verl.experimental.agent_loop.config import model_group, reward_in_loop_enabled, rollout_group
from verl.experimental.agent_loop.postprocess import align_parts
from verl.experimental.agent_loop.registry import get_agent_loop_spec, load_agent_loop_config, registry_snapshot
from verl.experimental.agent_loop.server_manager import RoutingStats
from verl.experimental.agent_loop.worker import (
    AGENT_LOOP_METRICS_KEY,
    BATCH_GROUP_KEY,
    ROW_OFFSET_KEY,
    AgentLoopWorker,
    resolve_agent_names,
)
from verl.protocol import DataProto
from verl.single_controller.ray.node_placement import on_this_node
from verl.utils.async_utils import await_ray, run_blocking
from verl.workers.rollout.batch_rendezvous import BatchGroup
from verl.workers.rollout.replica import worker_rank_replicas

__all__ = ["AgentLoopManager", "load_manager_class", "summarize_metrics"]


def _trainer_device(config: Any) -> str:
    """``cpu`` or ``cuda``: the flattened config's ``trainer.device`` with ``auto`` resolved."""
    from verl.trainer.config.trainer_config import TrainerConfig
    from verl.workers.fsdp.worker_config import read_group

    return read_group(config, "trainer", TrainerConfig).resolved_device()


logger = logging.getLogger(__name__)

MANAGER_CLASS_KEY = "rollout.agent.agent_loop_manager_class"


def load_manager_class(target: str) -> type:
    """The class ``rollout.agent.agent_loop_manager_class`` names; it must offer an async ``create``."""
    from verl.experimental.agent_loop.registry import _import_target

    cls = _import_target(target, MANAGER_CLASS_KEY)
    if not (isinstance(cls, type) and asyncio.iscoroutinefunction(getattr(cls, "create", None))):
        raise TypeError(f"{MANAGER_CLASS_KEY}={target!r}: {cls!r} is not a class with an async classmethod create")
    return cls


def summarize_metrics(per_sample: list[dict[str, float]]) -> dict[str, float]:
    """min/max/mean of each per-sample metric under ``agent_loop/<name>/...``."""
    summary: dict[str, float] = {}
    keys: list[str] = []
    for metrics in per_sample:
        keys.extend(k for k in metrics if k not in keys)
    for key in keys:
        values = np.array([m[key] for m in per_sample if key in m], dtype=np.float64)
        if values.size == 0:
            continue
        summary[f"agent_loop/{key}/min"] = float(values.min())
        summary[f"agent_loop/{key}/max"] = float(values.max())
        summary[f"agent_loop/{key}/mean"] = float(values.mean())
    return summary


def _named_death(err: BaseException) -> BaseException | None:
    """The error an agent-loop worker raised because an actor it called died (a WorkerDiedError naming a reward
    worker or replica, or the AllReplicasDeadError naming every dead replica), unwrapped from Ray's task error so
    that its own first line, not Ray's traceback header, is what the user reads; None for any other error."""
    from verl.experimental.agent_loop.server_manager import AllReplicasDeadError
    from verl.single_controller.ray.errors import WorkerDiedError

    cause = getattr(err, "cause", None)
    if isinstance(cause, WorkerDiedError | AllReplicasDeadError):
        return cause
    return None


class AgentLoopManager:
    """Turns prompt batches into trajectory batches through agent-loop workers and rollout replicas.

    Build it with :meth:`create`; the constructor only stores what ``create`` started.
    """

    def __init__(
        self,
        config: Any,
        *,
        workers: list[Any],
        replicas: list[Any],
        worker_group: Any = None,
        owned_replicas: list[Any] | None = None,
        sleep_between_batches: bool = False,
        call_timeout_s: float = 3600.0,
    ) -> None:
        self.config = config
        self.rollout_config = rollout_group(config)
        self.workers = list(workers)
        self.replicas = list(replicas)
        self.worker_group = worker_group
        self.owned_replicas = list(owned_replicas or [])
        self.sleep_between_batches = sleep_between_batches
        self.call_timeout_s = call_timeout_s

    # ------------------------------------------------------------------ construction

    @classmethod
    async def create(
        cls,
        config: Any,
        worker_group: Any = None,
        rollout_resource_pool: Any = None,
        *,
        replicas: list[Any] | None = None,
        reward_in_loop: bool | None = None,
        llm_client: Any = None,
        teacher_client: Any = None,
        reward_loop_worker_handles: list[Any] | None = None,
        worker_cls: type | None = None,
        server_kwargs: dict[str, Any] | None = None,
        request_timeout_s: float | None = 3600.0,
        call_timeout_s: float = 3600.0,
        max_sessions: int = 10000,
        sleep_between_batches: bool | None = None,
    ) -> AgentLoopManager:
        """Start (or attach to) the replicas and the agent-loop workers.

        Args:
            config: flattened trainer config (rollout, model, data, reward groups).
            worker_group: the actor worker group whose ranks host hybrid engines (hybrid mode).
            rollout_resource_pool: a ``RayResourcePool`` for standalone replicas (one per slot).
            replicas: replica handles to use as they are (standalone mode; not owned by the manager).
            reward_in_loop: score trajectories in the loop as they finish (None: ``reward.launch_reward_fn_async``).
            llm_client: verl's way: a ready client (``async generate(request_id, *, prompt_ids, sampling_params)``)
                the workers generate through, instead of replicas found or started here (nothing to sleep/wake).
            teacher_client: teacher servers for online distillation (not supported; must be None).
            reward_loop_worker_handles: verl reward-loop actors that score each trajectory as it finishes.
            worker_cls: the agent-loop worker class (default :class:`AgentLoopWorker`).
            server_kwargs: extra keyword arguments of the standalone servers (e.g. ``{"device": "cpu"}``).
            request_timeout_s: limit on one generate request; call_timeout_s: limit on one worker shard.
            max_sessions: sticky-session LRU bound per worker.
            sleep_between_batches: sleep/wake the replicas around each batch (None: hybrid,
                ``rollout.free_cache_engine`` and an accelerator; on CPU sleeping frees nothing and costs two calls).
        """
        rollout = rollout_group(config)
        custom = rollout.agent.agent_loop_manager_class
        if custom and cls is AgentLoopManager:
            target = load_manager_class(custom)
            if target is not AgentLoopManager:
                verl_kwargs = {
                    "llm_client": llm_client,
                    "teacher_client": teacher_client,
                    "reward_loop_worker_handles": reward_loop_worker_handles,
                }
                return await target.create(
                    config,
                    worker_group,
                    rollout_resource_pool,
                    replicas=replicas,
                    reward_in_loop=reward_in_loop,
                    worker_cls=worker_cls,
                    server_kwargs=server_kwargs,
                    request_timeout_s=request_timeout_s,
                    call_timeout_s=call_timeout_s,
                    max_sessions=max_sessions,
                    sleep_between_batches=sleep_between_batches,
                    **{key: value for key, value in verl_kwargs.items() if value is not None},
                )
        if rollout.agent.agent_loop_config_path:
            load_agent_loop_config(rollout.agent.agent_loop_config_path)
        get_agent_loop_spec(rollout.agent.default_agent_loop)  # unknown default: fail here, naming the choices

        if teacher_client is not None:
            raise NotImplementedError(
                "AgentLoopManager.create: online policy distillation (teacher_client) is not "
                "supported by this verl build"
            )
        owned: list[Any] = []
        if llm_client is not None:
            replica_list = []
        elif worker_group is not None:
            replica_list = worker_rank_replicas(worker_group, call_timeout_s)
        elif replicas is not None:
            replica_list = list(replicas)
        else:
            owned = await cls._start_standalone_replicas(config, rollout_resource_pool, server_kwargs)
            replica_list = owned
        if not replica_list and llm_client is None:
            raise ValueError("AgentLoopManager.create: no rollout replicas to route to")

        workers = await cls._start_workers(
            config,
            llm_client if llm_client is not None else replica_list,
            worker_cls or AgentLoopWorker,
            reward_in_loop=reward_in_loop,
            reward_loop_worker_handles=reward_loop_worker_handles,
            request_timeout_s=request_timeout_s,
            call_timeout_s=call_timeout_s,
            max_sessions=max_sessions,
        )
        if sleep_between_batches is None:
            on_cpu = _trainer_device(config) == "cpu"
            sleep_between_batches = worker_group is not None and bool(rollout.free_cache_engine) and not on_cpu
        return cls(
            config,
            workers=workers,
            replicas=replica_list,
            worker_group=worker_group,
            owned_replicas=owned,
            sleep_between_batches=sleep_between_batches,
            call_timeout_s=call_timeout_s,
        )

    @classmethod
    def create_blocking(
        cls, config: Any, worker_group: Any = None, rollout_resource_pool: Any = None, **kwargs: Any
    ) -> AgentLoopManager:
        """``create`` for synchronous callers (e.g. a trainer's ``init_workers``)."""
        return run_blocking(
            cls.create(config, worker_group, rollout_resource_pool, **kwargs), "AgentLoopManager.create_blocking"
        )

    @staticmethod
    async def _start_standalone_replicas(config: Any, pool: Any, server_kwargs: dict[str, Any] | None) -> list[Any]:
        import ray

        from verl.workers.fsdp.model_loader import resolve_model_path
        from verl.workers.rollout import StandaloneReplica
        from verl.workers.rollout.replica import standalone_replicas

        rollout = rollout_group(config)
        model_path = resolve_model_path(model_group(config))
        kwargs = dict(server_kwargs or {})
        if pool is not None:
            slots = await asyncio.to_thread(pool.bundle_slots)  # a pool slice hands out only its own slots
            return standalone_replicas(rollout, model_path, pool, slots=slots, server_kwargs=kwargs)
        count = int(rollout.nnodes) * int(rollout.n_gpus_per_node)
        if count < 1:
            raise ValueError(
                "AgentLoopManager.create needs worker_group (hybrid: the actor workers host the engines), "
                "rollout_resource_pool or replicas (standalone), or rollout.nnodes > 0 to start standalone "
                f"replicas itself; got rollout.nnodes={rollout.nnodes}"
            )
        num_gpus = 1 if ray.cluster_resources().get("GPU", 0) > 0 else 0
        return [
            StandaloneReplica(
                rollout, model_path, num_cpus=1, num_gpus=num_gpus, server_kwargs=kwargs, replica_rank=rank
            )
            for rank in range(count)
        ]

    @staticmethod
    async def _start_workers(
        config: Any,
        llm_client: Any,
        worker_cls: type,
        *,
        reward_in_loop: bool | None,
        request_timeout_s: float | None,
        call_timeout_s: float,
        max_sessions: int,
        reward_loop_worker_handles: list[Any] | None = None,
    ) -> list[Any]:
        import ray

        rollout = rollout_group(config)
        snapshot = registry_snapshot()
        remote_cls = ray.remote(worker_cls)
        workers = [
            remote_cls.options(num_cpus=0, name=None, **on_this_node()).remote(
                config,
                llm_client,
                None,
                reward_loop_worker_handles,
                registry=snapshot,
                reward_in_loop=reward_in_loop_enabled(config, reward_in_loop),
                request_timeout_s=request_timeout_s,
                max_sessions=max_sessions,
            )
            for _ in range(int(rollout.agent.num_workers))
        ]
        for i, worker in enumerate(workers):
            try:
                await await_ray(worker.ready.remote(), call_timeout_s, f"agent loop worker {i} start-up")
            except Exception as err:
                for w in workers:
                    ray.kill(w)
                raise RuntimeError(f"agent loop worker {i} failed to start: {err}") from err
        return workers

    # ------------------------------------------------------------------ generation

    def generate_sequences(self, batch: DataProto) -> DataProto:
        """Blocking twin of :meth:`generate_sequences_async` (refuses to run inside an event loop)."""
        return run_blocking(self.generate_sequences_async(batch), "AgentLoopManager.generate_sequences")

    async def generate_sequences_async(self, batch: DataProto) -> DataProto:
        """One trajectory per row of ``batch`` (repeat it ``rollout.n`` times first), in the rows' order."""
        if len(batch) == 0:
            raise ValueError("AgentLoopManager.generate_sequences got an empty batch")
        for name in dict.fromkeys(resolve_agent_names(batch, self.rollout_config.agent.default_agent_loop)):
            get_agent_loop_spec(name)  # unknown agent_name: fail before any request is sent
        start = time.perf_counter()
        if self.sleep_between_batches:
            await self.wake_up()
        try:
            output = await self._run_shards(batch)
        finally:
            if self.sleep_between_batches:
                await self.sleep()
        per_sample = output.meta_info.pop(AGENT_LOOP_METRICS_KEY)
        metrics = dict(output.meta_info.get("metrics") or {})
        metrics.update(summarize_metrics(per_sample))
        metrics["agent_loop/peak_in_flight"] = float(output.meta_info.pop(PEAK_IN_FLIGHT_KEY, 0))
        wall = time.perf_counter() - start
        metrics["agent_loop/generate_sequences_wall"] = wall
        output.meta_info["metrics"] = metrics
        # verl's convention: a generation output carries its stage times, which the trainer adds to the step's
        output.meta_info["timing"] = {"generate_sequences": wall}
        return output

    async def _run_shards(self, batch: DataProto) -> DataProto:
        shards = batch.chunk_balanced(min(len(self.workers), len(batch)))
        share = share_of(batch.meta_info.get(MAX_IN_FLIGHT_KEY), len(shards))
        # Hybrid engines merge the calls of one batch from several workers into one admission wave.
        group = BatchGroup(uuid.uuid4().hex, len(shards)) if self.worker_group is not None and len(shards) > 1 else None
        calls, offset = [], 0
        for i, shard in enumerate(shards):
            shard.meta_info = {**shard.meta_info, ROW_OFFSET_KEY: offset}
            if share is not None:
                shard.meta_info[MAX_IN_FLIGHT_KEY] = share
            if group is not None:
                shard.meta_info[BATCH_GROUP_KEY] = group
            rows = f"rows {offset}..{offset + len(shard) - 1}"
            calls.append(asyncio.ensure_future(self._generate_on_worker(i, shard, rows)))
            offset += len(shard)
        parts = await self._gather_or_stop(calls)
        metrics: list[dict[str, float]] = []
        peak = 0  # the workers' peaks summed: a bound of the trajectories in flight at once
        for part in parts:
            metrics.extend(part.meta_info.pop(AGENT_LOOP_METRICS_KEY))
            peak += int(part.meta_info.pop(PEAK_IN_FLIGHT_KEY, 0))
        output = DataProto.concat(align_parts(parts))
        output.meta_info[AGENT_LOOP_METRICS_KEY] = metrics
        output.meta_info[PEAK_IN_FLIGHT_KEY] = peak
        return output

    async def _generate_on_worker(self, index: int, shard: DataProto, rows: str) -> DataProto:
        """One worker's share; its death becomes a :class:`WorkerDiedError` naming it (role, index, node, the rows
        it was generating), as a dead training rank is named."""
        from ray.exceptions import RayActorError, RayTaskError

        from verl.single_controller.ray.errors import translate_ray_error

        worker = self.workers[index]
        what = f"agent loop worker {index} ({rows})"
        try:
            return await await_ray(worker.generate_sequences.remote(shard), self.call_timeout_s, what)
        except RayTaskError as err:
            named = _named_death(err)
            if named is None:
                raise
            # a replica or reward worker the agent loops called died: its own error, naming it, comes first
            named.args = (f"{named}\n(seen by {what})",)
            raise named from None
        except RayActorError as err:
            died = translate_ray_error(
                err, role="agent-loop worker", rank=index, method="generate_sequences", actor_id=worker._actor_id.hex()
            )
            died.args = (f"{died}\n(the worker was running the agent loops of {rows} of the batch)",)
            raise died from None

    async def _gather_or_stop(self, calls: list[asyncio.Future]) -> list[DataProto]:
        """Every worker's output. When a worker died, the others are stopped before its error is raised: the batch
        is lost and the run ends, and their requests must not outlive it to log errors of their own (about replicas
        torn down under them) after the one that names the cause."""
        from verl.experimental.agent_loop.server_manager import AllReplicasDeadError
        from verl.single_controller.ray.errors import WorkerDiedError

        try:
            return await asyncio.gather(*calls)
        except (WorkerDiedError, AllReplicasDeadError):
            import ray

            for call in calls:
                call.cancel()
            for worker in self.workers:
                try:
                    ray.kill(worker)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            raise

    # ------------------------------------------------------------------ replicas

    async def wake_up(self) -> None:
        """Rebuild the replicas' KV memory (hybrid: through the actor worker group)."""
        if self.worker_group is not None:
            await asyncio.to_thread(self.worker_group.wake_up_rollout)
        else:
            await asyncio.gather(*(replica.wake_up() for replica in self.replicas))

    async def sleep(self) -> None:
        """Free the replicas' KV memory while the trainer uses the device."""
        if self.worker_group is not None:
            await asyncio.to_thread(self.worker_group.sleep_rollout)
        else:
            await asyncio.gather(*(replica.sleep() for replica in self.replicas))

    async def server_stats(self) -> list[RoutingStats]:
        """Each worker's routing counters (requests per replica, sticky hits, retries, dead replicas)."""
        return list(
            await asyncio.gather(
                *(
                    await_ray(worker.server_stats.remote(), self.call_timeout_s, f"agent loop worker {i} server_stats")
                    for i, worker in enumerate(self.workers)
                )
            )
        )

    def shutdown(self) -> None:
        """Stop the workers and the replicas this manager started (not the hybrid workers, not given replicas)."""
        import ray

        for worker in self.workers:
            try:
                ray.kill(worker)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for replica in self.owned_replicas:
            try:
                replica.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.workers, self.owned_replicas = [], []
