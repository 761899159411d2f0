"""RestartPolicy: whether a failed PPO run may rebuild its workers and go on (``trainer.max_restarts``).

Only a lost process is worth a restart: a worker (or rollout replica) that died, alone or with its node. An
exception a worker raised is a bug or a bad input; rerunning the same step would raise it again, so it fails the
run at once. A restart resumes from the newest checkpoint this run wrote; when it wrote none yet, the run starts
over the way it first started (fresh, or from the checkpoint it resumed from), so no step is ever trained twice
into one checkpoint.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from omegaconf import DictConfig, open_dict, read_write

__all__ = ["RestartPolicy", "is_lost_process", "wait_until_confirmed_dead"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

# How long a restart waits for the cluster to confirm a death (Ray's node health checks take tens of seconds)
CONFIRM_DEATH_TIMEOUT_S = 90.0


def _chain(err: BaseException):
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_lost_process(err: BaseException) -> bool:
    """True when ``err`` (or an error it was raised from) says a worker process or its node is gone."""
    from ray.exceptions import NodeDiedError, RayActorError

    from verl.checkpoint_engine.manager import WeightSyncError
    from verl.experimental.agent_loop.server_manager import AllReplicasDeadError
    from verl.single_controller.ray.errors import WorkerDiedError

    for current in _chain(err):
        if isinstance(current, WorkerDiedError) and current.rank is not None:  # rank None: shut down on purpose
            return True
        if isinstance(current, WeightSyncError) and current.lost_replicas:  # a replica died mid-sync
            return True
        if isinstance(current, RayActorError | NodeDiedError | AllReplicasDeadError):
            return True
    return False


def wait_until_confirmed_dead(err: BaseException, timeout_s: float = CONFIRM_DEATH_TIMEOUT_S) -> None:
    """Wait (bounded) until the cluster's actor table marks the dead worker of ``err`` dead.

    A killed process is confirmed at once; a lost node only after the cluster's health checks give up on it, and
    until then the node still counts as alive, so a rebuild would place workers on it and wait there in vain."""
    from verl.checkpoint_engine.manager import WeightSyncError
    from verl.single_controller.ray.errors import WorkerDiedError
    from verl.single_controller.ray.node_placement import actor_record

    actor_ids: list[str] = []
    for current in _chain(err):
        if isinstance(current, WorkerDiedError) and current.actor_id:
            actor_ids.append(current.actor_id)
        elif isinstance(current, WeightSyncError):  # replicas lost mid-sync (their node, often)
            actor_ids.extend(current.lost_actor_ids)
    deadline = time.monotonic() + timeout_s
    for actor_id in dict.fromkeys(actor_ids):
        while actor_record(actor_id).get("State", "DEAD") != "DEAD":
            if time.monotonic() > deadline:
                logger.warning("actor %s not yet marked dead after %.0fs; rebuilding anyway", actor_id, timeout_s)
                return
            time.sleep(0.5)


class RestartPolicy:
    """Counts restarts against ``trainer.max_restarts`` and says what config the next attempt runs."""

    def __init__(self, config: DictConfig) -> None:
        from verl.trainer.config.trainer_config import TrainerConfig
        from verl.trainer.ppo.checkpointing import TrainerCheckpointer
        from verl.utils.config import omega_conf_to_dataclass

        self.config = config
        trainer = omega_conf_to_dataclass(config.trainer, TrainerConfig, path="trainer", keep_unknown=True)
        self.max_restarts = trainer.max_restarts
        self.restarts = 0
        self.checkpointer = TrainerCheckpointer(trainer)
        self.start_checkpoint = self.checkpointer.latest_step_dir()
        self.causes: list[str] = []

    def run(self, attempt: Callable[[DictConfig], T], after_failure: Callable[[], None] | None = None) -> T:
        """``attempt(config)`` with the run's config and, after each lost process the budget allows, with the next
        attempt's config; ``after_failure`` clears what a failed attempt left (actors, pools) before the next."""
        config = self.config
        while True:
            try:
                return attempt(config)
            except Exception as err:  # noqa: BLE001 - next_attempt re-raises whatever a restart cannot help
                if after_failure is not None:
                    after_failure()
                config = self.next_attempt(err)

    def next_attempt(self, err: Exception) -> DictConfig:
        """The config of the next attempt after ``err``; re-raises ``err`` when no restart is allowed or useful."""
        if not is_lost_process(err) or self.restarts >= self.max_restarts:
            if self.restarts and is_lost_process(err):
                logger.error(
                    "run failed after %d restart(s) (trainer.max_restarts=%d)", self.restarts, self.max_restarts
                )
            raise err
        self.restarts += 1
        wait_until_confirmed_dead(err)
        cause = str(err).splitlines()[0] if str(err) else type(err).__name__
        self.causes.append(cause)
        resume_dir = self._resume_dir()
        logger.warning(
            "restart %d of %d (trainer.max_restarts) after: %s; resuming from %s",
            self.restarts,
            self.max_restarts,
            cause,
            resume_dir or "the run's own start",
        )
        if resume_dir is None:
            return self.config
        attempt = copy.deepcopy(self.config)
        with read_write(attempt.trainer), open_dict(attempt.trainer):
            attempt.trainer.resume_mode = "resume_path"
            attempt.trainer.resume_from_path = str(resume_dir)
            attempt.trainer.del_local_ckpt_after_load = False  # a later restart may need the same checkpoint
        return attempt

    def _resume_dir(self) -> Path | None:
        """The newest complete checkpoint written since the run started; None when there is none."""
        latest = self.checkpointer.latest_step_dir()
        if latest is None or latest == self.start_checkpoint:
            return None
        return latest
