"""Rollouter: the rollout side of fully-async training, a Ray actor that never waits for training.

It owns the prompt stream (the trainer's dataloader, rebuilt here so the order matches), the standalone rollout
replicas and an agent-loop worker whose server manager resumes aborted requests. Each prompt group (``rollout.n``
samples) is generated concurrently with the others and put into the MessageQueue the moment it completes, tagged
with the parameter versions it started and ended under. How many groups may be open at once is bounded by the
staleness budget (:mod:`staleness`); the trainer drives weight syncs through :meth:`pause` / :meth:`resume`.

A sync aborts the requests in flight and re-issues them afterwards with the tokens they have (``partial_rollout``),
or, with ``async_training.keep_requests_through_sync``, only holds the engines between two decode steps while the
weights load, so requests continue on the new weights with their KV cache (no abort, no re-prefill).

Liveness: every wait has a timeout naming what it waited for; a failed group task marks the rollouter failed
(via ``spawn_logged``) and ``fit`` then closes the queue with the root cause, which the trainer reports.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import numpy as np

from verl.experimental.agent_loop.concurrency import MAX_IN_FLIGHT_KEY, PEAK_IN_FLIGHT_KEY, validation_max_in_flight
from verl.experimental.agent_loop.server_manager import AllReplicasDeadError
from verl.experimental.agent_loop.weight_versions import VERSION_KEYS
from verl.experimental.fully_async_policy.message_queue import END_OF_STREAM, CoalescingQueueWriter
from verl.experimental.fully_async_policy.sample import RolloutSample
from verl.experimental.fully_async_policy.staleness import StalenessBudget
from verl.experimental.separation.deaths import MESSAGE_QUEUE, await_from, is_actor_death
from verl.experimental.separation.rollout_pool import build_agent_worker
from verl.protocol import DataProto
from verl.single_controller.ray.errors import WorkerDiedError
from verl.utils.async_utils import FAILURE_ATTR, await_ray, spawn_logged

__all__ = ["Rollouter", "check_sync_mode", "groups_per_update", "total_rollout_prompts"]

logger = logging.getLogger(__name__)

_GEN_KEYS = ("input_ids", "attention_mask", "position_ids")
_WAIT_SLICE_S = 0.5


def groups_per_update(config: Any) -> int:
    """Prompt groups one trainer update consumes: ``require_batches x actor.ppo_mini_batch_size``."""
    return int(config.async_training.require_batches) * int(config.actor.ppo_mini_batch_size)


def check_sync_mode(async_cfg: Any) -> bool:
    """Whether weight syncs keep in-flight requests (``keep_requests_through_sync``); refuses it without
    ``partial_rollout``, which is what lets a request span two weight versions at all."""
    keep = bool(getattr(async_cfg, "keep_requests_through_sync", False))
    if keep and not bool(async_cfg.partial_rollout):
        raise ValueError(
            "async_training.keep_requests_through_sync=true needs async_training.partial_rollout=true: keeping "
            "requests through a weight sync lets one sample span two weight versions, which partial_rollout=false "
            "forbids (set one of them differently)"
        )
    return keep


def total_rollout_prompts(config: Any, batches_per_epoch: int) -> int:
    """``rollout.total_rollout_steps`` (prompts) or every prompt of ``trainer.total_epochs`` epochs."""
    total = config.rollout.total_rollout_steps
    if total is not None:
        return int(total)
    return batches_per_epoch * int(config.data.train_batch_size) * int(config.trainer.total_epochs)


class Rollouter:
    """Body of the rollouter Ray actor (``ray.remote(Rollouter)``; async methods).

    Args:
        config: the resolved trainer config (DictConfig).
        queue: MessageQueue actor handle.
        replicas: rollout replica handles on the rollout pool.
        sync_wait_timeout_s: longest wait for a weight sync while the staleness budget is used up (a dead trainer).
        put_timeout_s: longest wait for room in the queue.
        resume_timeout_s: longest time an aborted request waits for the sync to finish.
    """

    def __init__(
        self,
        config: Any,
        queue: Any,
        replicas: list[Any],
        *,
        sync_wait_timeout_s: float = 600.0,
        put_timeout_s: float = 600.0,
        resume_timeout_s: float = 600.0,
        request_timeout_s: float | None = 3600.0,
    ) -> None:
        from verl.trainer.ppo.dataloaders import build_dataloaders
        from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

        self.keep_requests = check_sync_mode(config.async_training)
        if self.keep_requests:
            _check_engine_keeps_requests(config.rollout)
        self.config = config
        self.queue = queue
        self.replicas = list(replicas)
        self.tokenizer = load_tokenizer(config.model, resolve_model_path(config.model))
        _, _, self.train_dataloader, self.val_dataloader = build_dataloaders(config, self.tokenizer)
        self.n = int(config.rollout.n)
        self.batch_size = int(config.data.train_batch_size)
        self.total_prompts = total_rollout_prompts(config, len(self.train_dataloader))
        async_cfg = config.async_training
        self.budget = StalenessBudget(
            groups_per_update(config), int(async_cfg.trigger_parameter_sync_step), float(async_cfg.staleness_threshold)
        )
        self.partial_rollout = bool(async_cfg.partial_rollout)
        self.sync_wait_timeout_s = float(sync_wait_timeout_s)
        self.put_timeout_s = float(put_timeout_s)
        self.coalesce_puts = bool(getattr(async_cfg, "coalesce_queue_puts", True))
        self.queue_writer = CoalescingQueueWriter(queue, self.put_timeout_s, coalesce=self.coalesce_puts)
        self.worker = build_agent_worker(
            config, self.replicas, resume_timeout_s=resume_timeout_s, request_timeout_s=request_timeout_s
        )
        self.version = 0
        self._paused = False
        self._stop_reason: str | None = None
        self._open_groups = 0
        self._in_flight: dict[int, asyncio.Task] = {}
        self._changed: asyncio.Event | None = None
        self.background_error: BaseException | None = None
        self._consumed: set[int] = set()
        self.stats = {
            "groups_started": 0,
            "groups_enqueued": 0,
            "groups_dropped_empty": 0,
            "samples_enqueued": 0,
            "samples_failed": 0,
            "syncs": 0,
            "max_open_groups": 0,
            "groups_skipped_consumed": 0,
            "samples_across_syncs": 0,  # started under one weight version, ended under a later one
        }

    # ------------------------------------------------------------------ public (remote) methods

    def ready(self) -> bool:
        return True

    def get_replica_actors(self) -> list[Any]:
        return [getattr(r, "actor", r) for r in self.replicas]

    def set_message_queue_client(self, message_queue_client: Any) -> None:
        """Put groups into the queue of ``message_queue_client`` (a ``MessageQueueClient``); before ``fit`` only."""
        if self.stats["groups_started"]:
            raise RuntimeError("rollouter.set_message_queue_client must be called before fit starts generating")
        self.queue = message_queue_client.queue_actor
        self.queue_writer = CoalescingQueueWriter(self.queue, self.put_timeout_s, coalesce=self.coalesce_puts)

    async def fit(self) -> dict[str, Any]:
        """Generate every prompt of the stream, then put END_OF_STREAM; returns the final statistics."""
        try:
            for index, prompt in self._iter_prompts():
                if index in self._consumed:  # trained on before the checkpoint this run resumed from
                    self.stats["groups_skipped_consumed"] += 1
                    continue
                await self._wait_for_budget(index)
                self._open_groups += 1
                self.stats["groups_started"] += 1
                self.stats["max_open_groups"] = max(self.stats["max_open_groups"], self._open_groups)
                self._in_flight[index] = spawn_logged(
                    self._run_group(index, prompt), owner=self, name=f"rollout group {index}"
                )
            await self._wait_until(
                lambda: not self._in_flight,
                self.sync_wait_timeout_s,
                f"the last {len(self._in_flight)} rollout group(s) to finish",
            )
            self._raise_if_failed()
            await await_from(
                self.queue.put.remote(END_OF_STREAM, self.put_timeout_s),
                role=MESSAGE_QUEUE,
                method="put",
                actor=self.queue,
                timeout_s=self.put_timeout_s + 30,
                doing="the rollouter was putting END_OF_STREAM",
            )
            return await self.get_statistics()
        except BaseException as exc:
            reason = self._stop_reason or f"rollouter failed: {type(exc).__name__}: {exc}"
            for task in self._in_flight.values():
                task.cancel()
            try:
                await await_ray(self.queue.close.remote(reason), 30, "message queue close")
            except Exception as close_error:  # noqa: BLE001 - the queue itself may be gone; the original error matters
                # a dead queue is what ``exc`` names already (the trainer reports it): no second line about it
                log = logger.info if is_actor_death(close_error) else logger.warning
                log("could not close the message queue after: %s", reason.splitlines()[0])
            raise

    async def restore(self, version: int, consumed_indices: list[int]) -> None:
        """Before ``fit`` of a resumed run: the replicas hold weight ``version``; skip the prompt indices the trainer
        consumed before its checkpoint (every other index is generated, including those lost in the queue)."""
        if self.stats["groups_started"]:
            raise RuntimeError("rollouter.restore must be called before fit starts generating")
        bad = [i for i in consumed_indices if not 0 <= int(i) < self.total_prompts]
        if bad:
            raise ValueError(
                f"rollouter.restore: consumed prompt indices {bad[:5]} are outside the stream of "
                f"{self.total_prompts} prompts (was rollout.total_rollout_steps or the data changed?)"
            )
        self._consumed = {int(i) for i in consumed_indices}
        self.version = int(version)
        self.worker.server_manager.resume(self.version)

    async def pause(self) -> dict[str, Any]:
        """Stop starting groups before a weight sync. Keeping requests, hold the engines between two decode steps
        (requests keep running after :meth:`resume`, on the new weights); with partial rollout, abort in-flight
        requests (they resume by themselves after :meth:`resume`); otherwise wait until every in-flight group is in
        the queue."""
        self._paused = True
        self._notify()
        start = time.perf_counter()
        if self.keep_requests:
            await asyncio.gather(*(r.pause_generation() for r in self.replicas))
        elif self.partial_rollout:
            self.worker.server_manager.pause()
            await asyncio.gather(*(r.abort_all() for r in self.replicas))
        else:
            await self._wait_until(
                lambda: not self._in_flight,
                self.sync_wait_timeout_s,
                f"{len(self._in_flight)} in-flight rollout group(s) before a weight sync",
            )
        self._raise_if_failed()
        return {"rollouter/pause_s": time.perf_counter() - start, "rollouter/in_flight_groups": len(self._in_flight)}

    async def resume(self, version: int) -> None:
        """Continue under weight ``version``: re-open replicas and aborted requests; leftovers count against the
        next period's staleness budget."""
        # The version is bumped before any replica re-opens, so nothing generated on the new weights is tagged with
        # the old version; the manager's gate opens last (aborted requests continue once every replica is open).
        self.version = int(version)
        self.worker.server_manager.version = self.version
        # the queue is counted while the replicas re-open (one round trip instead of two on the sync's path); the
        # aborted requests stay at the manager's gate until after the count. Groups still finish meanwhile (all of
        # them when requests are kept): the in-flight ones are counted before the queue is, so a group that moves
        # from one to the other in between is counted once or twice, never missed (the staleness bound holds).
        in_flight = len(self._in_flight)
        queued_ref = self.queue.size.remote()
        if self.partial_rollout:
            await asyncio.gather(*(r.resume() for r in self.replicas))
        queued = await await_from(queued_ref, role=MESSAGE_QUEUE, method="size", actor=self.queue, timeout_s=60)
        self.worker.server_manager.resume(self.version)
        self._open_groups = int(queued) + in_flight
        self.stats["syncs"] += 1
        self._paused = False
        self._notify()

    async def stop(self, reason: str) -> None:
        """Ask ``fit`` to stop (the trainer is done or failed); in-flight groups are cancelled."""
        self._stop_reason = str(reason)
        self._notify()

    async def get_statistics(self) -> dict[str, Any]:
        manager = self.worker.server_manager
        return {
            **self.stats,
            "open_groups": self._open_groups,
            "in_flight_groups": len(self._in_flight),
            "version": self.version,
            "requests_aborted": manager.num_aborted,
            "requests_resumed": manager.num_resumed,
            "max_allowed_open_groups": self.budget.max_open_groups,
        }

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        """Generate one trajectory per row (validation on the trainer side uses it)."""
        out = await self.worker.generate_sequences(batch)
        peak = out.meta_info.get(PEAK_IN_FLIGHT_KEY, 0)
        out.meta_info = {k: v for k, v in out.meta_info.items() if k in batch.meta_info}
        out.meta_info["metrics"] = {"agent_loop/peak_in_flight": float(peak)}
        return out

    async def validate(self, val_reward_fn: Any = None) -> dict[str, float]:
        """Validation on the rollout side: generate over the validation set with ``rollout.val_kwargs`` under the
        current weights and score it here; returns mean@n / best@n / pass@n metrics."""
        from verl.trainer.ppo.metric_utils import validation_reward_metrics
        from verl.trainer.ppo.reward import compute_reward, load_reward_manager

        if self.val_dataloader is None:
            return {}
        reward_fn = val_reward_fn or load_reward_manager(self.config, self.tokenizer, num_examine=0)
        n = int(self.config.rollout.val_kwargs.n)
        sources, uids, scores = [], [], []
        key = str(self.config.data.reward_fn_key)
        peak_in_flight = 0.0
        for batch_dict in self.val_dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = np.array([uuid.uuid4().hex for _ in range(len(batch))], dtype=object)
            batch.meta_info["validate"] = True
            batch.meta_info[MAX_IN_FLIGHT_KEY] = validation_max_in_flight(self.config)
            batch = batch.repeat(repeat_times=n, interleave=True)
            out = await self.generate_sequences(batch)
            peak_in_flight = max(peak_in_flight, out.meta_info["metrics"]["agent_loop/peak_in_flight"])
            reward = (await asyncio.to_thread(compute_reward, out, reward_fn))[0]
            scores.extend(reward.sum(-1).tolist())
            uids.extend(out.non_tensor_batch["uid"].tolist())
            sources.extend(out.non_tensor_batch.get(key, np.array(["unknown"] * len(out), dtype=object)).tolist())
        metrics = validation_reward_metrics(sources, uids, scores)
        metrics["val/param_version"] = float(self.version)
        metrics["val-aux/peak_in_flight"] = peak_in_flight
        return metrics

    # ------------------------------------------------------------------ internals

    def _notify(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.set()

    def _raise_if_failed(self) -> None:
        error = getattr(self, FAILURE_ATTR, None)
        # a dead actor (the queue) or every replica gone, already named: raised as it is, so that the trainer (and
        # a restart) sees a lost process, not a failure
        if isinstance(error, WorkerDiedError | AllReplicasDeadError):
            raise error
        if error is not None:
            raise RuntimeError(f"rollouter: a rollout group task failed: {type(error).__name__}: {error}") from error
        if self._stop_reason is not None:
            raise RuntimeError(f"rollouter stopped: {self._stop_reason}")

    async def _wait_until(self, condition, timeout_s: float, what: str) -> None:
        """Wait (in slices, re-checking failures and stop requests) until ``condition()``; a timeout names ``what``."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            self._raise_if_failed()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"rollouter: waited {timeout_s:g}s for {what}")
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=min(_WAIT_SLICE_S, remaining))
            except asyncio.TimeoutError:
                pass

    async def _wait_for_budget(self, index: int) -> None:
        await self._wait_until(
            lambda: not self._paused and self._open_groups < self.budget.max_open_groups,
            self.sync_wait_timeout_s,
            f"a weight sync before starting prompt {index} (staleness budget of {self.budget.max_open_groups} open "
            "group(s) used up; is the trainer alive?)",
        )

    def _iter_prompts(self):
        index = 0
        while index < self.total_prompts:
            progressed = False
            for batch_dict in self.train_dataloader:
                batch = DataProto.from_single_dict(batch_dict)
                for row in range(len(batch)):
                    if index >= self.total_prompts:
                        return
                    yield index, batch[row : row + 1]
                    index += 1
                    progressed = True
            if not progressed:
                raise ValueError("rollouter: the train dataloader yielded no prompts")

    def _seed(self, index: int, sample: int) -> int | None:
        from verl.trainer.ppo.ray_trainer import generation_seed

        step, position = divmod(index, self.batch_size)
        base = generation_seed(self.config, step + 1)
        return None if base is None else base + position * self.n + sample

    async def _run_sample(self, index: int, sample: int, prompt: DataProto, uid: str) -> tuple[DataProto, int]:
        """One trajectory of prompt ``index``, and the weight version current when it ended."""
        keys = [k for k in _GEN_KEYS if prompt.batch is not None and k in prompt.batch.keys()]
        row = prompt.select(batch_keys=keys, non_tensor_batch_keys=list(prompt.non_tensor_batch.keys()))
        row.non_tensor_batch["uid"] = np.array([uid], dtype=object)
        seed = self._seed(index, sample)
        row.meta_info = {} if seed is None else {"seed": seed}
        out = await self.worker.generate_sequences(row)
        out.meta_info = {}
        return out, self.version

    async def _run_group(self, index: int, prompt: DataProto) -> None:
        uid = uuid.uuid4().hex
        start = time.perf_counter()
        start_version = self.version
        results = await asyncio.gather(
            *(self._run_sample(index, j, prompt, uid) for j in range(self.n)), return_exceptions=True
        )
        rows, starts, ends, aborts = [], [], [], []
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                if isinstance(result, AllReplicasDeadError):  # nothing left to generate with: stop, naming them
                    self._in_flight.pop(index, None)
                    raise result
                self.stats["samples_failed"] += 1
                logger.warning("rollout group %d: a sample failed: %r", index, result)
                continue
            out, end_version = result
            rows.append(out)
            # the loop's version tags (verl's column names); a custom loop that does not report them falls back to
            # the versions current when the group started and when this sample ended
            tags = {key: _first(out, key) for key in VERSION_KEYS}
            starts.append(start_version if tags["min_global_steps"] is None else int(tags["min_global_steps"]))
            ends.append(end_version if tags["max_global_steps"] is None else int(tags["max_global_steps"]))
            aborts.append(int(tags["num_aborts"] or 0))
        try:
            if not rows:
                self.stats["groups_dropped_empty"] += 1
                logger.warning("rollout group %d: all %d samples failed; dropped", index, self.n)
                self._open_groups = max(0, self._open_groups - 1)
                return
            self.stats["samples_across_syncs"] += sum(int(end != begin) for begin, end in zip(starts, ends))
            batch = DataProto.concat(rows)
            batch.non_tensor_batch["param_version_start"] = np.array(starts, dtype=object)
            batch.non_tensor_batch["param_version_end"] = np.array(ends, dtype=object)
            batch.non_tensor_batch["num_aborts"] = np.array(aborts, dtype=object)
            batch.non_tensor_batch["rollout_index"] = np.array([index] * len(rows), dtype=object)
            sample = RolloutSample(
                batch=batch,
                index=index,
                uid=uid,
                start_version=min(starts),
                end_version=max(ends),
                num_aborts=sum(aborts),
                num_failed=self.n - len(rows),
                generate_s=time.perf_counter() - start,
            )
            try:
                await self.queue_writer.put(sample, f"message queue put of rollout group {index}", index=index)
            except WorkerDiedError as died:
                # the queue died: fit raises this once, naming it; each group logging it would bury that line
                if getattr(self, FAILURE_ATTR, None) is None:
                    setattr(self, FAILURE_ATTR, died)
                return
            self.stats["groups_enqueued"] += 1
            self.stats["samples_enqueued"] += len(rows)
        finally:
            self._in_flight.pop(index, None)
            self._notify()


def _check_engine_keeps_requests(rollout_config: Any) -> None:
    """Refuse, before anything starts, an engine whose server cannot hold generation without aborting."""
    from verl.workers.rollout.replica import server_class

    cls = server_class(rollout_config)
    if not callable(getattr(cls, "pause_generation", None)):
        raise ValueError(
            f"async_training.keep_requests_through_sync=true: the rollout server {cls.__name__} "
            f"(rollout.name={rollout_config.name!r}) has no pause_generation, so it cannot keep requests through a "
            "weight sync (the hf engine can); set keep_requests_through_sync=false"
        )


def _first(batch: DataProto, key: str) -> Any:
    """Column ``key`` of a one-row batch (None when the column is missing)."""
    column = batch.non_tensor_batch.get(key)
    return None if column is None else column[0]
