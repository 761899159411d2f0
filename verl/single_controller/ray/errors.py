"""Errors a worker group raises on the driver, and the bounded wait that produces them.

Every error names the worker (role, rank, actor name) and the method waited on; a raising worker's own traceback
is carried along; a dead worker's first logged error is quoted.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from verl.single_controller.ray.node_placement import actor_record, describe_node, node_of_actor
from verl.single_controller.ray.worker_process import read_first_error

TIMEOUT_ENV = "VERL_WORKER_CALL_TIMEOUT_S"
# How long a rank's error that reads like a lost peer (a collective's connection closed under it) waits for the
# cluster to say which rank died, so the error names the dead rank and its node rather than a survivor.
PEER_GRACE_ENV = "VERL_LOST_PEER_GRACE_S"
DEFAULT_PEER_GRACE_S = 45.0
_LOST_PEER_SIGNS = (
    "connection closed by peer",
    "connection reset by peer",
    "remote worker crashing",
    "broken pipe",
    "remote process exited",
    "socket closed",
    "connection refused",
)
DEFAULT_CALL_TIMEOUT_S = 1800.0
# The trainer key that bounds a group's start-up (verl's name: it bounded the wait for rank 0's register center).
STARTUP_TIMEOUT_KEY = "trainer.ray_wait_register_center_timeout"
DEFAULT_STARTUP_TIMEOUT_S = 300.0


def default_call_timeout_s() -> float:
    """Seconds a driver waits for a worker call: $VERL_WORKER_CALL_TIMEOUT_S, else 1800 (long training steps)."""
    raw = os.environ.get(TIMEOUT_ENV)
    if not raw:
        return DEFAULT_CALL_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"environment variable {TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"environment variable {TIMEOUT_ENV} must be > 0, got {raw!r}")
    return value


class WorkerError(RuntimeError):
    """A worker call failed; ``role``, ``rank``, ``method`` say where, ``worker_traceback`` says why."""

    def __init__(
        self, message: str, *, role: str, rank: int | None, method: str, worker_traceback: str | None = None
    ) -> None:
        super().__init__(message)
        self.role = role
        self.rank = rank
        self.method = method
        self.worker_traceback = worker_traceback

    def __reduce__(self):
        # keyword-only fields: the default exception pickling (positional args) could not rebuild them, and the
        # error crosses process boundaries (a task runner actor raises it to the driver)
        return _rebuild_error, (type(self), str(self), dict(self.__dict__))


def _rebuild_error(cls: type, message: str, state: dict[str, Any]) -> WorkerError:
    # the builtin base whose constructor lays the object out (OSError for the timeout, which is a TimeoutError too)
    layout_base = OSError if issubclass(cls, OSError) else Exception
    error: WorkerError = layout_base.__new__(cls, message)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class WorkerDiedError(WorkerError):
    """The worker's process died; ``first_logged_error`` is the first error it recorded before dying, if any, and
    ``node_id`` the node it ran on (the culprit when that node died with it)."""

    def __init__(
        self,
        message: str,
        *,
        first_logged_error: str | None = None,
        node_id: str | None = None,
        actor_id: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(message, **kwargs)
        self.first_logged_error = first_logged_error
        self.node_id = node_id
        self.actor_id = actor_id


class WorkerTimeoutError(WorkerError, TimeoutError):
    """No answer within the call timeout; ``pending_ranks`` lists who did not answer."""

    def __init__(self, message: str, *, pending_ranks: list[int], **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.pending_ranks = pending_ranks


def _who(role: str, rank: int, worker_names: list[str] | None) -> str:
    name = worker_names[rank] if worker_names and rank < len(worker_names) else None
    return f"{role} rank {rank}" + (f" (actor {name})" if name else "")


def translate_ray_error(
    err: Exception,
    *,
    role: str,
    rank: int,
    method: str,
    actor_id: str | None = None,
    worker_names: list[str] | None = None,
) -> WorkerError:
    """Turn Ray's error for one worker call into a WorkerError naming the worker."""
    who = _who(role, rank, worker_names)
    if isinstance(err, RayTaskError):
        cause = err.cause if isinstance(getattr(err, "cause", None), BaseException) else None
        summary = f"{type(cause).__name__}: {cause}" if cause is not None else str(err).splitlines()[0]
        tb = getattr(err, "traceback_str", None) or str(err)
        message = f"{who} failed in {method}(): {summary}\n--- traceback from {who} ---\n{tb}"
        return WorkerError(message, role=role, rank=rank, method=method, worker_traceback=tb)
    if isinstance(err, RayActorError):
        first = read_first_error(actor_id) if actor_id else None
        node_id = node_of_actor(actor_id) if actor_id else None
        pid = actor_record(actor_id).get("Pid") if actor_id else None
        where = (f" on {describe_node(node_id)}" if node_id else "") + (f", pid {pid}" if pid else "")
        message = f"{who} died during {method}(){where}: {err}"
        if first:
            message += f"\n--- first error logged by {who} ---\n{first}"
        else:
            message += "\n(the worker logged no error before dying)"
        return WorkerDiedError(
            message,
            role=role,
            rank=rank,
            method=method,
            first_logged_error=first,
            worker_traceback=first,
            node_id=node_id,
            actor_id=actor_id,
        )
    return WorkerError(f"{who} failed in {method}(): {type(err).__name__}: {err}", role=role, rank=rank, method=method)


def actor_died_error(
    err: Exception,
    *,
    role: str,
    index: int,
    method: str,
    actor: Any = None,
    context: str | None = None,
    error_cls: type[WorkerDiedError] | None = None,
) -> WorkerError:
    """Ray's error for a call on one named Ray actor (a rollout replica, a reward worker, the rollouter: any actor
    outside a worker group) as the error a dead training rank gets: a :class:`WorkerDiedError` whose first line names
    ``role``, ``index``, the node, the pid and ``method`` when the actor died, a :class:`WorkerError` naming them when
    the call raised. ``actor``: its handle, the ``ObjectRef`` of the call, or its id (hex). ``context`` (what the call
    was doing: the request, the rows) is added on a line of its own, after the line that names the dead actor;
    ``error_cls``: a :class:`WorkerDiedError` subclass the caller's own handlers know."""
    actor_id = actor if isinstance(actor, str) or actor is None else actor_id_of(actor)
    error = translate_ray_error(err, role=role, rank=index, method=method, actor_id=actor_id)
    if context:
        error.args = (f"{error.args[0]}\n({context})",)
    return error if error_cls is None else as_error_class(error, error_cls)


def as_error_class(error: WorkerError, error_cls: type[WorkerDiedError]) -> WorkerError:
    """A :class:`WorkerDiedError` another actor raised, as ``error_cls`` (the class the caller's handlers know),
    same message and fields; any other error as it is."""
    if not isinstance(error, WorkerDiedError) or isinstance(error, error_cls):
        return error
    return error_cls(
        str(error),
        role=error.role,
        rank=error.rank,
        method=error.method,
        first_logged_error=error.first_logged_error,
        worker_traceback=error.worker_traceback,
        node_id=error.node_id,
        actor_id=error.actor_id,
    )


def actor_id_of(actor: Any) -> str | None:
    """The hex id of the actor behind a handle, or behind the ``ObjectRef`` of a call on it; None when unknown."""
    try:
        if isinstance(actor, ray.ObjectRef):
            actor_id = actor.task_id().actor_id()
            return None if actor_id.is_nil() else actor_id.hex()
        return actor._actor_id.hex()
    except Exception:  # noqa: BLE001 - a stand-in object in tests: the error still names role and call
        return None


def is_actor_death(err: BaseException) -> bool:
    """Ray says the called actor itself died (not: the call raised, whatever it raised)."""
    return isinstance(err, RayActorError) and not isinstance(err, RayTaskError)


def worker_error_in(err: BaseException) -> WorkerError | None:
    """The :class:`WorkerError` a remote call raised (the cause of Ray's ``RayTaskError``), else None: when a live
    actor failed because another one died and named it, that error is the first line to show."""
    if isinstance(err, WorkerError) and not isinstance(err, RayTaskError):
        return err
    cause = getattr(err, "cause", None) if isinstance(err, RayTaskError) else None
    return cause if isinstance(cause, WorkerError) else None


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (its type's name when it has none): what a log line quotes."""
    text = str(err)
    return text.splitlines()[0] if text.strip() else type(err).__name__


def wait_for_workers(
    refs: list,
    *,
    ranks: list[int],
    method: str,
    role: str,
    timeout_s: float,
    actor_ids: list[str] | None = None,
    worker_names: list[str] | None = None,
) -> list[Any]:
    """ray.get for one call on several ranks, bounded by ``timeout_s``; the first failure is raised at once
    (other ranks may be blocked in a collective with the failed one, so waiting for them could hang)."""
    results: list[Any] = [None] * len(refs)
    pending = {ref: i for i, ref in enumerate(refs)}
    deadline = time.monotonic() + timeout_s
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            late = sorted(ranks[i] for i in pending.values())
            raise WorkerTimeoutError(
                f"timed out after {timeout_s:g}s waiting for {role}.{method}() on rank(s) {late} "
                f"(raise the limit with {TIMEOUT_ENV} or the group's call_timeout_s)",
                role=role,
                rank=late[0],
                method=method,
                pending_ranks=late,
            )
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=min(remaining, 5.0))
        if ready:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
        for ref in ready:
            i = pending.pop(ref)
            rank = ranks[i]
            try:
                results[i] = ray.get(ref, timeout=max(deadline - time.monotonic(), 1.0))
            except GetTimeoutError:
                pending[ref] = i
            except (RayTaskError, RayActorError) as err:
                if isinstance(err, RayTaskError) and pending and _reads_like_lost_peer(err):
                    dead = _find_dead_peer(pending, ranks, actor_ids, _peer_grace_s())
                    if dead is not None:
                        dead_rank, dead_err = dead
                        raise died_error(
                            role=role,
                            rank=dead_rank,
                            method=method,
                            cause=dead_err,
                            actor_id=_actor_id(actor_ids, dead_rank),
                            worker_names=worker_names,
                            seen_by=f"rank {rank}: {str(err).splitlines()[-1][:300]}",
                        ) from err
                raise translate_ray_error(
                    err,
                    role=role,
                    rank=rank,
                    method=method,
                    actor_id=_actor_id(actor_ids, rank),
                    worker_names=worker_names,
                ) from err
    return results


def _actor_id(actor_ids: list[str] | None, rank: int) -> str | None:
    return actor_ids[rank] if actor_ids and rank < len(actor_ids) else None


def _peer_grace_s() -> float:
    raw = os.environ.get(PEER_GRACE_ENV)
    try:
        return float(raw) if raw else DEFAULT_PEER_GRACE_S
    except ValueError:
        raise ValueError(f"environment variable {PEER_GRACE_ENV} must be a number of seconds, got {raw!r}") from None


def _reads_like_lost_peer(err: Exception) -> bool:
    text = str(err).lower()
    return any(sign in text for sign in _LOST_PEER_SIGNS)


def _find_dead_peer(
    pending: dict, ranks: list[int], actor_ids: list[str] | None, grace_s: float
) -> tuple[int, Exception | None] | None:
    """Within ``grace_s``, the first still-pending rank whose call fails because its actor died, or whom the
    cluster's actor table marks dead; None when every other rank answers or the grace runs out."""
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
        for ref in ready:
            i = pending.pop(ref)
            try:
                ray.get(ref, timeout=1.0)
            except RayActorError as err:
                return ranks[i], err
            except Exception:  # noqa: BLE001 - another survivor's error; keep looking for the dead rank
                continue
        for i in pending.values():
            actor_id = _actor_id(actor_ids, ranks[i])
            if actor_id and actor_record(actor_id).get("State") == "DEAD":
                return ranks[i], None
    return None


def died_error(
    *,
    role: str,
    rank: int,
    method: str,
    cause: Exception | None,
    actor_id: str | None,
    worker_names: list[str] | None,
    seen_by: str | None = None,
) -> WorkerError:
    """The WorkerDiedError of a rank whose actor is gone (``cause``: Ray's error for its call, if one came)."""
    if cause is not None:
        error = translate_ray_error(
            cause, role=role, rank=rank, method=method, actor_id=actor_id, worker_names=worker_names
        )
    else:
        node_id = node_of_actor(actor_id) if actor_id else None
        where = f" on {describe_node(node_id)}" if node_id else ""
        death = str((actor_record(actor_id).get("DeathCause") if actor_id else None) or "its actor is dead")[:500]
        error = WorkerDiedError(
            f"{_who(role, rank, worker_names)} died during {method}(){where}: {death}",
            role=role,
            rank=rank,
            method=method,
            node_id=node_id,
            actor_id=actor_id,
        )
    if seen_by and isinstance(error, WorkerDiedError):
        error.args = (f"{error.args[0]}\n(first seen as a lost connection by {seen_by})",)
    return error


def startup_timeout_error(
    role: str, timeout_s: float, answered: int, world_size: int, pending_ranks: list[int], detail: str
) -> WorkerTimeoutError:
    """The start-up ran out of time: say how many workers came up, who did not, and which key sets the limit."""
    return WorkerTimeoutError(
        f"{role} worker group: {answered} of {world_size} workers started within {timeout_s:g}s "
        f"({STARTUP_TIMEOUT_KEY}); rank(s) {pending_ranks} did not answer: {detail}. Raise "
        f"{STARTUP_TIMEOUT_KEY} if start-up is only slow (large imports, busy nodes)",
        role=role,
        rank=pending_ranks[0] if pending_ranks else None,
        method="__init__",
        pending_ranks=pending_ranks,
    )


def wait_for_startup(
    refs: list,
    *,
    role: str,
    remaining_s: float,
    limit_s: float,
    actor_ids: list[str] | None = None,
    worker_names: list[str] | None = None,
) -> None:
    """Wait until every worker's constructor has returned (``__ray_ready__`` refs, one per rank), at most
    ``remaining_s`` of the start-up limit ``limit_s``; a constructor that raised is reported at once, naming its
    rank."""
    ranks = list(range(len(refs)))
    try:
        # a spent budget still collects the workers that are already up, so the count in the error is right
        wait_for_workers(
            refs,
            ranks=ranks,
            method="__init__",
            role=role,
            timeout_s=max(remaining_s, 0.01),
            actor_ids=actor_ids,
            worker_names=worker_names,
        )
    except WorkerTimeoutError as err:
        raise startup_timeout_error(
            role,
            limit_s,
            len(refs) - len(err.pending_ranks),
            len(refs),
            err.pending_ranks,
            "their constructors are still running or Ray has not started their processes",
        ) from None
