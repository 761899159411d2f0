"""FullyAsyncTrainer: the training side of fully-async PPO, fed by the Rollouter through the MessageQueue.

Each update takes ``require_batches x ppo_mini_batch_size`` prompt groups from the queue (in stream order, so the
result does not depend on which group finished first) and runs the inherited PPO stages on them. Every
``trigger_parameter_sync_step`` updates it syncs weights itself: pause the rollouter (abort in-flight requests when
``partial_rollout``), publish version v+1 through the checkpoint engine, resume. With ``staleness_threshold=0``,
``trigger_parameter_sync_step=1`` and no partial rollout this is exactly the synchronous trainer.

Checkpoints add the rollout position: which prompt indices the trainer has consumed. A resumed run pushes the restored
actor to the replicas, then the rollouter skips the consumed indices and generates every other one; groups that were
queued or in flight at the kill are regenerated under the resumed weights (none lost, none trained on twice).

With ``async_training.trainer_generates_while_waiting`` (ours) the actor ranks host rollout engines that serve the
rollouter while this trainer waits for groups and hand their requests on while it computes (:mod:`trainer_replica`).

verl's names: a step pulls its batch in ``_get_samples_from_queue`` and measures it in
``_collect_metrics_from_samples``; ``_fit_update_local_step`` counts the update into the period
(``local_trigger_step``) and ``_fit_update_weights`` syncs at its end; ``_fit_postprocess_step`` adds the step to the
period's aggregate (``metrics_aggregator``). ``current_param_version`` is the weight version, ``required_samples`` the
groups per update, ``message_queue_client`` the queue's client.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import ray

from verl.experimental.agent_loop.server_manager import AllReplicasDeadError
from verl.experimental.fully_async_policy.detach_utils import MetricsAggregator, assemble_batch_from_rollout_samples
from verl.experimental.fully_async_policy.dynamic_schedule import DynamicScheduleContext
from verl.experimental.fully_async_policy.message_queue import (
    END_OF_STREAM,
    MessageQueue,
    MessageQueueClient,
    QueueClosedError,
    resolve_refs,
)
from verl.experimental.fully_async_policy.policy_snapshots import PolicySnapshots, row_versions
from verl.experimental.fully_async_policy.rollouter import Rollouter, groups_per_update
from verl.experimental.fully_async_policy.sample import RolloutSample
from verl.experimental.fully_async_policy.trainer_replica import (
    TRAINER_REPLICA_KEY,
    TrainerReplicaRollouter,
    check_trainer_replica_config,
)
from verl.experimental.separation.deaths import (
    MESSAGE_QUEUE,
    ROLLOUTER,
    as_error_class,
    get_from,
    is_actor_death,
    worker_error_in,
)
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.experimental.separation.rollout_pool import start_rollout_replicas
from verl.protocol import DataProto
from verl.single_controller.ray.errors import WorkerDiedError, actor_died_error
from verl.single_controller.ray.node_placement import on_this_node
from verl.trainer.ppo.ray_trainer import StopTraining, marked_timer
from verl.trainer.ppo.utils import Role

__all__ = [
    "FullyAsyncTrainer",
    "RolloutDiedError",
    "RolloutFailedError",
    "TrainingStopException",
    "compress_indices",
    "expand_indices",
]

TrainingStopException = StopTraining  # verl's name: raised when the rollout stream has ended

logger = logging.getLogger(__name__)

POLL_S = 1.0


def compress_indices(indices: list[int]) -> dict[str, Any]:
    """``{"below": w, "above": [...]}``: every index < w plus the sorted ones >= w (consumed sets are near-prefixes)."""
    seen = set(indices)
    below = 0
    while below in seen:
        below += 1
    return {"below": below, "above": sorted(i for i in seen if i > below)}


def expand_indices(packed: dict[str, Any]) -> list[int]:
    return list(range(int(packed["below"]))) + [int(i) for i in packed["above"]]


class RolloutFailedError(RuntimeError):
    """The rollouter died or failed; the message carries its own first error."""


class RolloutDiedError(WorkerDiedError, RolloutFailedError):
    """The rollouter or the message queue died: its first line names the role, the node, the pid and the call in
    flight, as a dead training rank's does (a ``RolloutFailedError`` too, for the handlers of either)."""


class FullyAsyncTrainer(SeparateRayPPOTrainer):
    """Trainer of the fully-async recipe. ``role_worker_mapping`` has ``Role.Actor`` (a worker with
    ``send_weights``) and ``Role.Rollout`` is mapped to the rollout pool in ``resource_pool_manager``.

    ``rollouter_class`` is the Rollouter body ``init_workers`` starts (a recipe's subclass goes here); the methods
    are synchronous, where verl's are ``async def``.
    """

    rollouter_class: type = Rollouter
    # async_training.trainer_generates_while_waiting (set by __init__; class defaults for trainers built without it)
    trainer_generates: bool = False
    trainer_replicas: tuple[Any, ...] | list[Any] = ()
    _trainer_replicas_open: bool = False

    # Stages whose time is training compute (absent ones count 0): the numerator of the trainer's utilisation.
    _TRAIN_COMPUTE_TIMING_KEYS = (
        "reward",
        "old_log_prob",
        str(Role.RefPolicy),
        "values",
        "adv",
        "update_critic",
        "update_actor",
    )

    def __init__(
        self, *args: Any, queue_timeout_s: float = 600.0, sync_wait_timeout_s: float = 600.0, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        async_cfg = self.ppo_config.async_training
        self.groups_per_update = groups_per_update(self.ppo_config)
        self.require_batches = int(async_cfg.require_batches)
        self.trigger_parameter_sync_step = async_cfg.trigger_parameter_sync_step
        self.staleness_threshold = float(async_cfg.staleness_threshold)
        self.partial_rollout = async_cfg.partial_rollout
        self.use_rollout_log_probs = async_cfg.use_rollout_log_probs
        self.use_trainer_do_validate = async_cfg.use_trainer_do_validate
        # async_training.trainer_generates_while_waiting (see trainer_replica): the actor ranks are replicas too
        self.trainer_generates = check_trainer_replica_config(async_cfg)
        self.trainer_replicas: list[Any] = []
        self._trainer_replicas_open = False
        self._trainer_engines_checked = False  # the first load into them was checked against the actor
        trainer_cfg = self.ppo_config.trainer
        if not self.use_trainer_do_validate and (trainer_cfg.validation_data_dir or trainer_cfg.log_val_generations):
            logger.warning(
                "trainer.validation_data_dir / log_val_generations apply to validation on the trainer "
                "side: set async_training.use_trainer_do_validate=true, or the rollouter validates "
                "without them"
            )
        if self.use_rollout_log_probs and not self.ppo_config.rollout.calculate_log_probs:
            raise ValueError(
                "async_training.use_rollout_log_probs=true needs the rollout's log-probs: set "
                "rollout.calculate_log_probs=true (or use_rollout_log_probs=false)"
            )
        self.queue_timeout_s = float(queue_timeout_s)
        self.sync_wait_timeout_s = float(sync_wait_timeout_s)
        self.local_updates = 0
        self._weights_unpushed = False  # actor updates since the last push
        self.consumed_groups = 0
        self.consumed_indices: list[int] = []
        self.leftover_groups = 0
        self.stale_groups_per_sync: list[int] = []
        self._stale_this_period = 0
        self.stale_trajectory_processed = 0  # stale groups trained on so far
        self.last_ckpt_version = 0  # the weight version the newest checkpoint holds
        # Ray actor handles and the rollouter's fit() reference, once started
        self.rollouter: Any = None
        self.queue: Any = None
        self.message_queue_client: MessageQueueClient | None = None
        self._rollouter_ref: Any = None
        self.policy_snapshots: PolicySnapshots | None = None  # built with the workers
        self._resumed = False  # load_checkpoint ran (fit must not load again)
        # the last sync: the rollouter's report (None while no sync ended in this step)
        self._sync_report: dict[str, Any] | None = None
        # waits for the queue within the current sync period: seconds, and groups not already queued
        self._step_wait_times: list[float] = []
        self._step_wait_samples: list[int] = []
        # The rollout replicas stand alone on the rollout pool (the trainer's ranks join them, while it waits, only
        # with trainer_generates_while_waiting) and there is no dynamic resource scheduling; the context records
        # what such a decision would look at, per sync.
        self.dynamic_schedule_enabled = False
        self.only_hybrid = False
        self.dynamic_schedule_ctx = DynamicScheduleContext(
            required_samples=self.groups_per_update,
            trigger_parameter_sync_step=int(self.trigger_parameter_sync_step),
            total_generated_samples=0,
            expected_samples=0,
            buffer_samples=0,
        )
        trainer_gpus = trainer_cfg.nnodes * trainer_cfg.n_gpus_per_node
        rollout_gpus = int(self.config.rollout.nnodes) * int(self.config.rollout.n_gpus_per_node)
        self.metrics_aggregator = MetricsAggregator(
            total_gpus=trainer_gpus + rollout_gpus, hybrid_gpus=trainer_gpus, standalone_gpus=rollout_gpus
        )
        # total prompts the rollouter will produce bounds the number of updates
        from verl.experimental.fully_async_policy.rollouter import total_rollout_prompts

        total_updates = total_rollout_prompts(self.ppo_config, len(self.train_dataloader)) // self.groups_per_update
        if trainer_cfg.total_training_steps is not None:
            total_updates = min(total_updates, trainer_cfg.total_training_steps)
        self.total_training_steps = total_updates

    # ------------------------------------------------------------------ verl's names for this trainer's counters

    @property
    def current_param_version(self) -> int:
        """verl's name for the weight version the rollout holds (``weight_version``)."""
        return self.weight_version

    @current_param_version.setter
    def current_param_version(self, version: int) -> None:
        self.weight_version = int(version)

    @property
    def local_trigger_step(self) -> int:
        """Position (1-based) of the next update within the current sync period of
        ``trigger_parameter_sync_step`` updates; 1 right after a sync."""
        return self.local_updates % int(self.trigger_parameter_sync_step) + 1

    @property
    def required_samples(self) -> int:
        """Prompt groups one update trains on: ``require_batches x actor.ppo_mini_batch_size``."""
        return self.groups_per_update

    @property
    def processed_samples(self) -> int:
        """Prompt groups trained on so far (``consumed_groups``)."""
        return self.consumed_groups

    @property
    def total_train_steps(self) -> int:
        """verl's name for ``total_training_steps``: the updates this run makes (see :meth:`set_total_train_steps`)."""
        return self.total_training_steps

    @property
    def train_role(self) -> Role:
        """The role of the trainer's actor group (``Role.Actor``: it hosts no engine)."""
        return self.actor_role

    def get_actor_wg(self) -> Any:
        return self.actor_wg

    def set_total_train_steps(self, total_training_steps: int) -> None:
        """Train ``total_training_steps`` updates. Before ``init_workers`` the optimizers' schedules follow it too;
        afterwards only the loop does (the schedules keep the count the workers were built with)."""
        if getattr(self, "actor_rollout_wg", None) is not None and total_training_steps != self.total_training_steps:
            logger.warning(
                "set_total_train_steps(%d) after init_workers: the learning-rate schedules keep %d steps",
                total_training_steps,
                self.total_training_steps,
            )
        self.total_training_steps = int(total_training_steps)

    def set_message_queue_client(self, message_queue_client: MessageQueueClient) -> None:
        """Read rollout groups from ``message_queue_client``'s queue, and have the rollouter write there; before
        ``fit`` only."""
        if self._rollouter_ref is not None:
            raise RuntimeError("set_message_queue_client must be called before fit")
        self.message_queue_client = message_queue_client
        self.queue = message_queue_client.queue_actor
        if self.rollouter is not None:
            self._call(ROLLOUTER, "set_message_queue_client", message_queue_client)

    def set_rollouter(self, rollouter: Any) -> None:
        """Generate with ``rollouter`` (a Rollouter actor over this trainer's ``replicas`` writing to its queue)
        instead of the one ``init_workers`` started, which is stopped; before ``fit`` only."""
        if self._rollouter_ref is not None:
            raise RuntimeError("set_rollouter must be called before fit")
        previous, self.rollouter = self.rollouter, rollouter
        if previous is not None and previous is not rollouter:
            ray.kill(previous, no_restart=True)
        self._init_generation_client()

    # ------------------------------------------------------------------ set-up

    def init_workers(self) -> None:
        self._check_resume_state()  # before any worker starts: a foreign checkpoint fails in seconds
        super().init_workers()
        cfg = self.config.async_training
        self.policy_snapshots = PolicySnapshots(
            self.actor_rollout_wg,
            int(cfg.trigger_parameter_sync_step),
            float(cfg.staleness_threshold),
            old_log_prob_pass=not self.bypass_mode,
        )
        self.policy_snapshots.pushed(self.weight_version)
        if self.trainer_generates:
            self._start_trainer_replicas()

    def _create_actor_rollout_classes(self) -> None:
        """The actor; with ``trainer_generates_while_waiting`` a hybrid actor+rollout worker whose engine takes
        prompts as long as a resumed request's (as the standalone replicas do)."""
        if not self.trainer_generates:
            return super()._create_actor_rollout_classes()
        import dataclasses

        from verl.experimental.separation.rollout_pool import continuation_rollout_config
        from verl.single_controller.ray import RayClassWithInitArgs

        config = self.worker_config
        config = dataclasses.replace(config, rollout=continuation_rollout_config(config.rollout))
        pool = self.resource_pool_manager.get_resource_pool(self.actor_role)
        cls = RayClassWithInitArgs(self.role_worker_mapping[self.actor_role], config=config, role="actor_rollout")
        self.resource_pool_to_cls.setdefault(pool, {})[self.actor_role_name] = cls

    def _start_trainer_replicas(self) -> None:
        """Hand the actor ranks' engines to the rollouter (closed until the trainer waits) with the trainer's
        current weights in them."""
        from verl.workers.rollout.replica import worker_rank_replicas

        self.trainer_replicas = worker_rank_replicas(self.actor_wg, call_timeout_s=self.sync_wait_timeout_s)
        self._load_trainer_engines()
        self._call(ROLLOUTER, "add_trainer_replicas", self.trainer_replicas)

    def _load_trainer_engines(self) -> None:
        """Load the actor's weights into its ranks' engines as ``weight_version`` (their tokens carry it). The first
        load is checked against the actor's own checksum in the engine's dtype (the path is the same afterwards)."""
        from verl.experimental.separation.rollout_pool import checkpoint_engine_dtype

        version = int(self.weight_version)
        reports = self.actor_wg.update_rollout_weights(version)
        if self._trainer_engines_checked:
            return
        expected = self.actor_wg.actor_weights_checksum(checkpoint_engine_dtype(self.config))[0]
        for rank, report in enumerate(reports):
            got = None if report is None else report.get("checksum")
            if str(got) != str(expected):
                raise RuntimeError(
                    f"{TRAINER_REPLICA_KEY}: the engine of trainer rank {rank} loaded weights with checksum {got} "
                    f"as version {version}, but the actor's weights hash to {expected}"
                )
        self._trainer_engines_checked = True

    def _rollouter_body(self) -> type:
        """``rollouter_class``, or with ``trainer_generates_while_waiting`` the rollouter that serves the trainer's
        ranks too (a recipe's class must then derive from :class:`TrainerReplicaRollouter`)."""
        cls = self.rollouter_class
        if not self.trainer_generates or issubclass(cls, TrainerReplicaRollouter):
            return cls
        if cls is Rollouter:
            return TrainerReplicaRollouter
        raise TypeError(
            f"{TRAINER_REPLICA_KEY}=true: rollouter_class {cls.__name__} must derive from "
            "verl.experimental.fully_async_policy.trainer_replica.TrainerReplicaRollouter"
        )

    def _init_rollout(self, pool: Any) -> None:
        max_queue = max(1, self._budget_groups() * 2)
        controller_side = {"num_cpus": 0, "max_concurrency": 1000, **on_this_node()}
        self.queue = ray.remote(MessageQueue).options(**controller_side).remote(max_queue)
        self.message_queue_client = MessageQueueClient(self.queue, timeout_s=self.queue_timeout_s)
        self.replicas = start_rollout_replicas(self.config, pool)
        self.rollouter = (
            ray.remote(self._rollouter_body())
            .options(**controller_side)
            .remote(
                self.config,
                self.queue,
                self.replicas,
                sync_wait_timeout_s=self.sync_wait_timeout_s,
                put_timeout_s=self.queue_timeout_s,
                resume_timeout_s=self.sync_wait_timeout_s,
            )
        )
        self._call(ROLLOUTER, "ready")

    def _generation_actor(self) -> Any:
        return self.rollouter

    def _generation_timeout_s(self) -> float:
        return self.sync_wait_timeout_s

    def _generation_role(self) -> str:
        return ROLLOUTER

    def _budget_groups(self) -> int:
        from verl.experimental.fully_async_policy.staleness import StalenessBudget

        cfg = self.config.async_training
        return StalenessBudget(
            self.groups_per_update, int(cfg.trigger_parameter_sync_step), float(cfg.staleness_threshold)
        ).max_open_groups

    # ------------------------------------------------------------------ liveness

    def _call(self, role: str, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """``method(*args)`` on the rollouter or the message queue (``role``), waited for by :meth:`_get`."""
        actor = self.rollouter if role == ROLLOUTER else self.queue
        return self._get(getattr(actor, method).remote(*args), f"{role} {method}()", timeout_s)

    def _get(self, ref: Any, what: str, timeout_s: float | None = None) -> Any:
        """``ray.get`` of the call ``what`` (``"<role> <method>()"``) bounded by ``timeout_s`` (default
        ``sync_wait_timeout_s``); a dead actor becomes a :class:`RolloutDiedError` naming it (role, node, pid,
        method), and an error the actor raised naming another dead one is raised as it is."""
        role, _, call = what.rpartition(" ")
        return get_from(
            ref,
            role=role,
            method=call.removesuffix("()"),
            actor=self.rollouter if role == ROLLOUTER else self.queue,
            timeout_s=timeout_s or self.sync_wait_timeout_s,
            error_cls=RolloutDiedError,
        )

    def _rollouter_failure(self, wait_s: float = 0.0, doing: str | None = None) -> BaseException | None:
        """Why the rollouter's ``fit`` ended, when it ended with an error (waiting up to ``wait_s`` for it to end):
        its death (``doing``: what the trainer was waiting for), the dead actor its own error names, or its error
        as a :class:`RolloutFailedError`."""
        ref = self._rollouter_ref
        if ref is None:
            return None
        done, _ = ray.wait([ref], timeout=wait_s)
        if not done:
            return None
        try:
            ray.get(ref, timeout=5)
        except Exception as exc:  # noqa: BLE001 - the root cause is what we want to show
            named = worker_error_in(exc)
            if named is not None:  # the rollouter named a dead process (the queue): the trainer's handlers know it
                return as_error_class(named, RolloutDiedError)
            if is_actor_death(exc):
                return actor_died_error(
                    exc,
                    role=ROLLOUTER,
                    index=0,
                    method="fit",
                    actor=getattr(self, "rollouter", None) or ref,
                    context=f"rollouter failed: its actor is gone; {doing or 'the trainer was waiting for it'}",
                    error_cls=RolloutDiedError,
                )
            cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None else exc
            if isinstance(cause, AllReplicasDeadError):  # names each dead replica already; a lost process
                return cause
            return RolloutFailedError(f"rollouter failed: {type(cause).__name__}: {cause}")
        return None

    def _rollouter_root_cause(self) -> str | None:
        """The rollouter's own error, as text, when its ``fit`` has ended with one."""
        failure = self._rollouter_failure()
        return None if failure is None else str(failure)

    def _pull_groups(self, count: int) -> list[Any]:
        """``count`` groups from the queue (fewer only before END_OF_STREAM), waiting in slices so that a failed
        or dead rollouter is noticed within about POLL_S seconds; ``queue_timeout_s`` bounds the whole wait.
        Payloads come from the object store in one fetch (the queue moves references only). A dead queue or
        rollouter raises :class:`RolloutDiedError` naming it."""
        deadline = time.monotonic() + self.queue_timeout_s
        doing = f"the fully-async trainer was waiting for {count} rollout group(s) from the message queue"
        while True:
            try:
                items = get_from(
                    self.queue.get.remote(count, POLL_S),
                    role=MESSAGE_QUEUE,
                    method="get",
                    actor=self.queue,
                    timeout_s=POLL_S + 30,
                    doing=doing,
                    error_cls=RolloutDiedError,
                )
                try:
                    return resolve_refs(items, self.queue_timeout_s)
                except RuntimeError as exc:
                    raise self._rollouter_failure(wait_s=5.0, doing=doing) or RolloutFailedError(
                        f"{exc}; rollouter: {self._rollouter_root_cause()}"
                    ) from exc
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if exc.cause is not None else exc
                if isinstance(cause, QueueClosedError):
                    # closed by the rollouter on its way down: its own error says why (a dead actor by name)
                    raise self._rollouter_failure(wait_s=5.0, doing=doing) or RolloutFailedError(str(cause)) from None
                if not isinstance(cause, TimeoutError):
                    raise
            root = self._rollouter_failure(doing=doing)
            if root is not None:
                raise root
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"fully-async trainer: no {count} rollout group(s) within {self.queue_timeout_s:g}s "
                    "(is the rollouter alive and generating?)"
                )

    # ------------------------------------------------------------------ stages

    def _fit_start(self) -> None:
        if self.trainer_generates:  # the first update waits for every group: the first ones spread over them too
            self._open_trainer_replicas()
        self._rollouter_ref = self.rollouter.fit.remote()

    def _fit_finish(self, error: BaseException | None) -> None:
        reason = "trainer finished" if error is None else f"trainer failed: {type(error).__name__}: {error}"
        if self.rollouter is None:
            return
        for role, actor, method in ((ROLLOUTER, self.rollouter, "stop"), (MESSAGE_QUEUE, self.queue, "close")):
            try:
                ray.get(getattr(actor, method).remote(reason), timeout=30)
            except Exception:  # noqa: BLE001 - already dead is fine: it is stopping either way
                logger.info("%s already gone while stopping: %s", role, reason.splitlines()[0])
        if self._rollouter_ref is not None:
            ray.wait([self._rollouter_ref], timeout=30)
            if error is not None:
                # read, so Ray does not log the rollouter's error as unhandled after the one that names the cause
                self._rollouter_failure()

    def _iter_batch_dicts(self):
        while True:
            yield None

    def _fit_get_batch(self, batch_dict: dict | None) -> None:
        """No prompts from a dataloader here: the rollouter owns it."""
        return None

    def _fit_generate(self, batch: DataProto | None = None) -> DataProto:
        """The next update's groups from the queue, ordered by their position in the prompt stream."""
        with marked_timer("gen", self.timing_raw):
            epoch, batch = self._get_samples_from_queue()
            if epoch is None or batch is None:
                raise StopTraining(
                    f"the rollouter's stream ended ({self.leftover_groups} group(s) left over, fewer than the "
                    f"{self.groups_per_update} one update needs)"
                )
            self.epoch = epoch
            self._collect_metrics_from_samples(batch, self.metrics)
        return self._fit_assemble(None, batch)

    def _get_samples_from_queue(self) -> tuple[int, DataProto] | tuple[None, None]:
        """``(epoch, batch)`` of the next ``required_samples`` groups, or ``(None, None)`` once the stream has
        ended with too few left (``leftover_groups``: taken from the queue, not trained on). Per group,
        ``batch.meta_info`` carries its start version (``trajectory_param_versions``), aborts and failures."""
        start = time.perf_counter()
        queued = int(self._call(MESSAGE_QUEUE, "size"))
        if self.trainer_generates and queued < self.groups_per_update:
            self._open_trainer_replicas()
        try:
            items = self._pull_groups(self.groups_per_update)
        except BaseException:
            self._close_trainer_replicas(quiet=True)  # the pull's error is the one to report
            raise
        trainer_replica = self._close_trainer_replicas()
        samples: list[RolloutSample] = [item for item in items if item != END_OF_STREAM]
        if len(samples) < self.groups_per_update:
            self.leftover_groups = len(samples)
            return None, None
        wait_s = time.perf_counter() - start
        self._step_wait_times.append(wait_s)
        self._step_wait_samples.append(max(0, self.groups_per_update - queued))
        batch = assemble_batch_from_rollout_samples(samples)
        self.consumed_groups += len(samples)
        self.consumed_indices.extend(sorted(s.index for s in samples))
        if not self.use_rollout_log_probs and batch.batch is not None:
            batch.batch.pop("rollout_log_probs", None)
        ordered = sorted(samples, key=lambda s: s.index)
        batch.meta_info.update(
            {
                "trajectory_param_versions": [s.start_version for s in ordered],
                "fully_async/partial/aborts": float(sum(s.num_aborts for s in samples)),
                "fully_async/failed_samples": float(sum(s.num_failed for s in samples)),
                "fully_async/total_wait_time": wait_s,
            }
        )
        if self.trainer_generates:
            batch.meta_info.update({f"fully_async/trainer_replica/{k}": float(v) for k, v in trainer_replica.items()})
        prompts_per_epoch = max(1, len(self.train_dataloader) * int(self.ppo_config.data.train_batch_size))
        return ordered[0].index // prompts_per_epoch, batch

    def _collect_metrics_from_samples(self, batch: DataProto, metrics: dict[str, Any]) -> None:
        """Staleness of the batch's groups against the current weights (a histogram, mean, max, how many are
        stale), partial-rollout and failure counts, and the running counters; the batch's ``fully_async/*`` and
        ``timing_s/*`` meta-info goes in as it is."""
        staleness = [self.weight_version - int(v) for v in batch.meta_info["trajectory_param_versions"]]
        stale = sum(1 for k in staleness if k > 0)
        self._stale_this_period += stale
        self.stale_trajectory_processed += stale
        histogram = Counter(staleness)
        metrics.update({f"fully_async/staleness/{k}": float(histogram.get(k, 0)) for k in range(max(staleness) + 1)})
        metrics.update({k: v for k, v in batch.meta_info.items() if k.startswith(("fully_async", "timing_s"))})
        metrics.update(
            {
                "fully_async/staleness/mean": float(np.mean(staleness)),
                "fully_async/staleness/max": float(max(staleness)),
                "fully_async/stale_groups": float(stale),
                "fully_async/partial/aborted_samples": float(
                    sum(int(a > 0) for a in batch.non_tensor_batch["num_aborts"])
                ),
                "fully_async/param_version": float(self.weight_version),
                "fully_async/consumed_groups": float(self.consumed_groups),
                "fully_async/count/stale_trajectory_processed": float(self.stale_trajectory_processed),
            }
        )

    def _actor_version(self) -> int | None:
        """The weight version the actor holds now; None once it was updated after its last push."""
        return None if self._weights_unpushed else int(self.weight_version)

    def _compute_old_log_prob(self, batch: DataProto) -> tuple[DataProto, float | None]:
        """Old log-probs of each row under the weights that generated it (see ``policy_snapshots``)."""
        if self.policy_snapshots is None:  # before init_workers: nothing was pushed, the actor is the policy
            return super()._compute_old_log_prob(batch)
        versions = row_versions(batch, self.weight_version)
        return self.policy_snapshots.compute(batch, versions, self._actor_version(), super()._compute_old_log_prob)

    def _update_supplies_old_log_probs(self, batch: DataProto) -> bool:
        """The update's own forward pass gives the old log-probs only when every row comes from the weights the
        actor still holds."""
        current = self._actor_version()
        if current is None or not bool((row_versions(batch, current) == current).all()):
            return False
        return self._on_policy_update(batch)

    def _fit_update_actor(self, batch: DataProto) -> DataProto:
        batch = super()._fit_update_actor(batch)
        self._fit_update_local_step()
        return batch

    def _fit_update_local_step(self) -> None:
        """Count the step's update into the sync period (a critic warm-up step counts too: the period, and the
        staleness budget with it, still ends)."""
        self.local_updates += 1
        if self._actor_warmed_up():
            self._weights_unpushed = True

    def _fit_update_weights(self) -> dict[str, Any] | None:
        """At the end of every sync period of ``trigger_parameter_sync_step`` updates, and after the last update:
        pause the rollouter, publish the next version (when the actor changed), resume. Returns the rollouter's
        report of the sync, or None when this step did not sync."""
        self._sync_report = None
        period_done = self.local_trigger_step == 1
        # The last update is pushed even mid-period, so the servers end on the final weights (rollout-side
        # validation after the last step, users reading them back).
        final_push = self._weights_unpushed and self.global_steps >= self.total_training_steps
        if not (period_done or final_push):
            return None
        self._sync_report = self._sync_rollouter(self.metrics)
        return self._sync_report

    def _sync_rollouter(self, metrics: dict) -> dict[str, Any]:
        start = time.perf_counter()
        # a sync's start in the log: where a run that died mid-sync stopped (the chaos soak aims a kill at it)
        logger.info("weight sync started at step %d (version %d)", self.global_steps, self.weight_version)
        report = self._call(ROLLOUTER, "pause")
        metrics.update(report)
        if self._weights_unpushed:
            self._push_weights(metrics)
            self._weights_unpushed = False
        if self.trainer_generates:
            # open before the resume: the groups it starts and the requests the pause aborted spread over them too
            self._open_trainer_replicas()
        self._call(ROLLOUTER, "resume", self.weight_version)
        self.stale_groups_per_sync.append(self._stale_this_period)
        self._stale_this_period = 0
        metrics["fully_async/sync_s"] = time.perf_counter() - start
        self._update_schedule_context()
        return report

    def _update_schedule_context(self) -> None:
        """``dynamic_schedule_ctx`` as of this sync: generated vs. consumed groups, the staleness budget and the
        period's waits for the queue (which start afresh)."""
        ctx = self.dynamic_schedule_ctx
        stats = self._call(ROLLOUTER, "get_statistics")
        ctx.total_generated_samples = int(stats.get("groups_enqueued", 0))
        ctx.expected_samples = self.consumed_groups
        ctx.buffer_samples = int(ctx.step_required_samples * self.staleness_threshold)
        ctx.step_wait_times, ctx.step_wait_samples = self._step_wait_times, self._step_wait_samples
        self._step_wait_times, self._step_wait_samples = [], []

    def _update_rollout_weights(self, metrics: dict) -> None:
        """``checkpoint_manager.update_weights()``: publish with the rollouter paused, as a sync does."""
        self._weights_unpushed = True
        self._sync_rollouter(metrics)

    def _push_weights(self, metrics: dict) -> None:
        super()._push_weights(metrics)
        if self.trainer_replicas:  # closed here (the trainer computes, or the rollouter is paused for this sync)
            self._load_trainer_engines()
        if self.policy_snapshots is not None:
            self.policy_snapshots.pushed(self.weight_version)

    def _open_trainer_replicas(self) -> None:
        if self.trainer_replicas and not self._trainer_replicas_open:
            self._call(ROLLOUTER, "open_trainer_replicas")
            self._trainer_replicas_open = True

    def _close_trainer_replicas(self, quiet: bool = False) -> dict[str, float]:
        """Close the trainer-side replicas before the trainer computes; how long they were open and what they
        generated meanwhile (zeros when they were closed). ``quiet``: on the way out of an error, a failure here
        is logged, not raised."""
        closed = {"open_s": 0.0, "requests": 0.0, "tokens": 0.0}
        if not self._trainer_replicas_open:
            return closed
        self._trainer_replicas_open = False
        try:
            return self._call(ROLLOUTER, "close_trainer_replicas")
        except Exception as exc:
            if not quiet:
                raise
            logger.info("could not close the trainer-side replicas: %s", str(exc).splitlines()[0] if str(exc) else exc)
            return closed

    def _fit_postprocess_step(self) -> None:
        """The step's share of the trainer's utilisation, the queue's length, and the step's metrics into the
        sync period's aggregate (merged into the metrics of the step that ends the period)."""
        super()._fit_postprocess_step()
        self._record_train_resource_utilization(self.timing_raw.get("step", 0.0))
        self.metrics["fully_async/mq_size"] = float(self._call(MESSAGE_QUEUE, "size"))
        self.metrics_aggregator.add_step_metrics(self.metrics, sample_count=self.required_samples)
        if self._sync_report is not None:
            self._fit_log_aggregated_training_metrics(self._sync_report)

    def _record_train_resource_utilization(self, allocated_time: float) -> None:
        """Seconds of training compute (``_TRAIN_COMPUTE_TIMING_KEYS``) and of the step's whole turn, as raw
        numbers, so that a period's utilisation is the ratio of their sums."""
        compute = sum(self.timing_raw.get(key, 0.0) for key in self._TRAIN_COMPUTE_TIMING_KEYS)
        self.metrics["dynamic_resource/train_compute_time_s"] = compute
        self.metrics["dynamic_resource/train_allocated_time_s"] = float(allocated_time)

    def _fit_log_aggregated_training_metrics(self, rollout_reset_timing_raw: dict[str, Any]) -> None:
        """End of a sync period: its aggregate (``metrics_aggregator``) plus the sync's rollouter report join the
        step's metrics under ``period/`` when the period had more than one update (one update: the step's own
        metrics are the period's); the aggregator starts afresh."""
        aggregated = self.metrics_aggregator.get_aggregated_metrics()
        if self.metrics_aggregator.step_count > 1:
            aggregated.update(rollout_reset_timing_raw)
            self.metrics.update({f"period/{key}": value for key, value in aggregated.items()})
        self.metrics_aggregator.reset()

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        return self._call(ROLLOUTER, "generate_sequences", gen_batch)

    def _validate(self, merged: bool = False) -> dict[str, float]:
        if self.use_trainer_do_validate:
            return self._trainer_side_validate()
        return self._call(ROLLOUTER, "validate")

    def _trainer_side_validate(self) -> dict[str, float]:
        """``async_training.use_trainer_do_validate``: generate on the rollout replicas, score and report here
        (validation dumps and logged generations apply); returns the metrics."""
        return super()._validate()

    # ------------------------------------------------------------------ checkpoints

    def load_checkpoint(self) -> int:
        """Resume from the newest checkpoint now (``trainer.resume_mode``); returns the restored weight version
        (0 when starting fresh). ``fit`` then does not load again."""
        self._load_checkpoint()
        return self.weight_version

    def _load_checkpoint(self) -> None:
        if self._resumed:
            return
        super()._load_checkpoint()
        self._resumed = True

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        self.last_ckpt_version = self.weight_version + (1 if self._weights_unpushed else 0)

    def _checkpoint_state(self) -> dict[str, Any]:
        state = super()._checkpoint_state()
        synced = not self._weights_unpushed
        # Updates not yet pushed (mid sync period) make the saved actor the next version; the resumed run starts a
        # new sync period with it.
        state["weight_version"] = self.weight_version + (0 if synced else 1)
        state["weight_checksum"] = self.weight_checksums.get(self.weight_version) if synced else None
        periods = -(-self.local_updates // self.trigger_parameter_sync_step)
        state["fully_async"] = {
            "consumed_indices": compress_indices(self.consumed_indices),
            "local_updates": periods * self.trigger_parameter_sync_step,
            "stale_groups_per_sync": list(self.stale_groups_per_sync),
        }
        return state

    @staticmethod
    def _require_fully_async_state(step_dir: Any, state: dict[str, Any]) -> dict[str, Any]:
        saved = state.get("fully_async")
        if saved is None:
            raise ValueError(
                f"checkpoint {step_dir} has no fully-async state (rollout position): another trainer "
                "wrote it; resume it with that trainer or start fresh (trainer.resume_mode=disable)"
            )
        return saved

    def _check_resume_state(self) -> None:
        step_dir = self.checkpointer.find_resume_dir()
        if step_dir is not None:
            self._require_fully_async_state(step_dir, self.checkpointer.load_trainer_state(step_dir))

    def _restore_checkpoint(self, step_dir: Path, state: dict[str, Any]) -> None:
        saved = self._require_fully_async_state(step_dir, state)
        super()._restore_checkpoint(step_dir, state)
        expected = state.get("weight_checksum")
        if expected is not None and self.weight_checksums.get(self.weight_version) != expected:
            raise RuntimeError(
                f"resumed from {step_dir}: the restored actor (checksum "
                f"{self.weight_checksums.get(self.weight_version)}) differs from the weights saved as "
                f"version {self.weight_version} (checksum {expected})"
            )
        self.consumed_indices = expand_indices(saved["consumed_indices"])
        self.consumed_groups = len(self.consumed_indices)
        self.local_updates = int(saved["local_updates"])
        self.stale_groups_per_sync = list(saved.get("stale_groups_per_sync", []))
        self.stale_trajectory_processed = sum(self.stale_groups_per_sync)
        self.last_ckpt_version = self.weight_version
        self._call(ROLLOUTER, "restore", self.weight_version, self.consumed_indices)

    def _resume_rollout_weights(self, version: int) -> None:
        """Push the restored actor as ``version`` directly (the rollouter has not started: no pause needed)."""
        self.weight_version = version - 1
        self._push_weights({})

    def rollout_statistics(self) -> dict[str, Any]:
        """The rollouter's and the queue's counters (tests compare counts in and out)."""
        stats: dict[str, Any] = {}
        stats.update(self._call(ROLLOUTER, "get_statistics"))
        stats.update(self._call(MESSAGE_QUEUE, "get_statistics"))
        return stats
