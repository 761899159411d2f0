"""A dead controller-side actor of the async recipes (the fully-async rollouter and message queue, the one-step-off
generator), named the way a dead training rank is (:func:`translate_ray_error`): the first line of the error says
the role, its index, the node, the pid and the call in flight, e.g.
``message queue rank 0 died during get() on node 3f2a... (10.0.0.5, alive), pid 4711: The actor died ...``.

The waits on those actors go through :func:`get_from` / :func:`await_from`: bounded, and a death becomes a
:class:`WorkerDiedError` naming the actor called. A call whose actor is alive but failed because *another* actor it
waited on died arrives as a ``RayTaskError``; when that actor named the dead one (its own error is a
:class:`WorkerError`) that error is raised as it is, so a dead queue seen through the rollouter is still reported as
the queue, never as the rollouter.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from verl.single_controller.ray.errors import (
    WorkerDiedError,
    actor_died_error,
    actor_id_of,
    as_error_class,
    is_actor_death,
    worker_error_in,
)

__all__ = [
    "GENERATOR",
    "MESSAGE_QUEUE",
    "ROLLOUTER",
    "actor_id_of",
    "as_error_class",
    "await_from",
    "get_from",
    "is_actor_death",
    "worker_error_in",
]

ROLLOUTER = "rollouter"
MESSAGE_QUEUE = "message queue"
GENERATOR = "one-step-off generator"


def _raise_for(
    err: BaseException, role: str, method: str, actor: Any, index: int, doing: str | None, error_cls: type
) -> None:
    named = worker_error_in(err)
    if named is not None:  # the actor named who died (itself alive): that is the first line to read
        raise as_error_class(named, error_cls) from None
    if is_actor_death(err):
        raise actor_died_error(
            err, role=role, index=index, method=method, actor=actor, context=doing, error_cls=error_cls
        ) from None


def get_from(
    ref: Any,
    *,
    role: str,
    method: str,
    actor: Any,
    timeout_s: float,
    index: int = 0,
    doing: str | None = None,
    error_cls: type[WorkerDiedError] = WorkerDiedError,
) -> Any:
    """``ray.get(ref)`` of a call of ``method`` on ``actor`` (``role`` ``index``), at most ``timeout_s``; a dead
    actor raises ``error_cls`` (a :class:`WorkerDiedError`) naming it, see ``actor_died_error``."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except GetTimeoutError:
        during = f" ({doing})" if doing else ""
        raise TimeoutError(f"{role} did not answer {method}() within {timeout_s:g}s{during}") from None
    except (RayTaskError, RayActorError) as err:
        _raise_for(err, role, method, actor, index, doing, error_cls)
        raise


async def await_from(
    ref: Any,
    *,
    role: str,
    method: str,
    actor: Any,
    timeout_s: float,
    index: int = 0,
    doing: str | None = None,
    error_cls: type[WorkerDiedError] = WorkerDiedError,
) -> Any:
    """:func:`get_from` for an event loop."""
    from verl.utils.async_utils import await_ray

    try:
        return await await_ray(ref, timeout_s, f"{role} {method}()" + (f" ({doing})" if doing else ""))
    except (RayTaskError, RayActorError) as err:
        _raise_for(err, role, method, actor, index, doing, error_cls)
        raise
