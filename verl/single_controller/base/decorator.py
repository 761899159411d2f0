"""``@register``: tell the driver how a worker method is fanned out to ranks and how results come back."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from verl.single_controller.base import dispatch as _dispatch
from verl.single_controller.base.dispatch import (  # noqa: F401 - verl's import path for the split/merge functions
    collect_all_to_all,
    collect_dp_compute,
    collect_dp_compute_data_proto,
    dispatch_all_to_all,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
    make_nd_compute_dataproto_dispatch_fn,
)
from verl.single_controller.base.dynamic_enum import DynamicEnum

# verl's name for the pair behind Dispatch.DIRECT_ROLLOUT_METHOD (such methods are never called on the group).
dummy_direct_rollout_call = _dispatch.dispatch_direct_rollout_method

# Attribute set on registered methods; the worker group looks for it to bind group-level methods.
MAGIC_ATTR = "__verl_register_attrs__"


class Dispatch(DynamicEnum):
    """How a group call's arguments are split over ranks (and results merged). Extend with register_dispatch_mode."""


class Execute(DynamicEnum):
    """Which ranks run the method: every rank or rank 0 only."""


for _name in (
    "RANK_ZERO",
    "ONE_TO_ALL",
    "ALL_TO_ALL",
    "DP_COMPUTE",
    "DP_COMPUTE_PROTO",
    "DP_COMPUTE_PROTO_WITH_FUNC",
    "DP_COMPUTE_METRIC",
    "DIRECT_ROLLOUT_METHOD",
):
    Dispatch.register(_name)
Execute.register("ALL")
Execute.register("RANK_ZERO")

DISPATCH_MODE_FN_REGISTRY: dict[DynamicEnum, dict[str, Callable]] = {
    Dispatch.RANK_ZERO: {"dispatch_fn": _dispatch.dispatch_all_to_all, "collect_fn": _dispatch.collect_all_to_all},
    Dispatch.ONE_TO_ALL: {"dispatch_fn": _dispatch.dispatch_one_to_all, "collect_fn": _dispatch.collect_all_to_all},
    Dispatch.ALL_TO_ALL: {"dispatch_fn": _dispatch.dispatch_all_to_all, "collect_fn": _dispatch.collect_all_to_all},
    Dispatch.DP_COMPUTE: {"dispatch_fn": _dispatch.dispatch_dp_compute, "collect_fn": _dispatch.collect_dp_compute},
    Dispatch.DP_COMPUTE_PROTO: {
        "dispatch_fn": _dispatch.dispatch_dp_compute_data_proto,
        "collect_fn": _dispatch.collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: {
        "dispatch_fn": _dispatch.dispatch_dp_compute_data_proto_with_func,
        "collect_fn": _dispatch.collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_METRIC: {
        "dispatch_fn": _dispatch.dispatch_dp_compute_data_proto,
        "collect_fn": _dispatch.collect_dp_compute,
    },
    Dispatch.DIRECT_ROLLOUT_METHOD: {
        "dispatch_fn": _dispatch.dispatch_direct_rollout_method,
        "collect_fn": _dispatch.collect_all_to_all,
    },
}


def register_dispatch_mode(name: str, dispatch_fn: Callable, collect_fn: Callable) -> DynamicEnum:
    """Add ``Dispatch.<name>`` with its own split/merge pair; returns the new member.

    ``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` and ``collect_fn(worker_group, outputs)``.
    Wrap per-rank values in ``PerRank`` (or plain lists of world_size length) so rank i gets element i.
    """
    _check_pair(name, dispatch_fn, collect_fn)
    member = Dispatch.register(name)
    DISPATCH_MODE_FN_REGISTRY[member] = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
    return member


def update_dispatch_mode(dispatch_mode: DynamicEnum, dispatch_fn: Callable, collect_fn: Callable) -> None:
    """Replace the split/merge pair of an existing mode (e.g. to add tracing)."""
    if dispatch_mode not in Dispatch:
        raise ValueError(f"update_dispatch_mode: {dispatch_mode!r} is not a Dispatch member")
    _check_pair(dispatch_mode.name, dispatch_fn, collect_fn)
    DISPATCH_MODE_FN_REGISTRY[dispatch_mode] = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}


def _check_pair(name: str, dispatch_fn: Any, collect_fn: Any) -> None:
    if not callable(dispatch_fn):
        raise TypeError(f"dispatch mode {name!r}: dispatch_fn must be callable, got {type(dispatch_fn).__name__}")
    if not callable(collect_fn):
        raise TypeError(f"dispatch mode {name!r}: collect_fn must be callable, got {type(collect_fn).__name__}")


def get_predefined_dispatch_fn(dispatch_mode: DynamicEnum | dict) -> dict[str, Callable]:
    """The {dispatch_fn, collect_fn} pair for a mode (a Dispatch member or an explicit dict)."""
    if isinstance(dispatch_mode, dict):
        return dispatch_mode
    if dispatch_mode not in DISPATCH_MODE_FN_REGISTRY:
        raise ValueError(f"no dispatch/collect functions registered for {dispatch_mode!r}")
    return DISPATCH_MODE_FN_REGISTRY[dispatch_mode]


def get_predefined_execute_fn(execute_mode: DynamicEnum) -> dict[str, str]:
    """``{"execute_fn_name": ...}``: the worker-group method that runs a call in ``execute_mode``."""
    _check_execute_mode(execute_mode)
    name = "execute_rank_zero" if execute_mode is Execute.RANK_ZERO else "execute_all"
    return {"execute_fn_name": name}


def _check_dispatch_mode(dispatch_mode: Any) -> None:
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - set(dispatch_mode)
        if missing:
            raise ValueError(f"register(dispatch_mode=dict) is missing key(s) {sorted(missing)}")
        _check_pair("<dict>", dispatch_mode["dispatch_fn"], dispatch_mode["collect_fn"])
        return
    if dispatch_mode not in Dispatch:
        raise ValueError(
            f"register(dispatch_mode=...) must be a Dispatch member or a dict with 'dispatch_fn' and 'collect_fn', "
            f"got {dispatch_mode!r}"
        )


def _check_execute_mode(execute_mode: Any) -> None:
    if execute_mode not in Execute:
        raise ValueError(f"register(execute_mode=...) must be Execute.ALL or Execute.RANK_ZERO, got {execute_mode!r}")


def _materialize_futures(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Resolve DataProtoFuture arguments inside the worker, so chained non-blocking calls receive real data."""
    from verl.single_controller.base.future_args import resolve_future_slots

    args, kwargs = resolve_future_slots(args, kwargs)
    try:
        from verl.protocol import DataProtoFuture
    except ImportError:  # protocol not importable: nothing can be a future
        return args, kwargs
    args = tuple(a.get() if isinstance(a, DataProtoFuture) else a for a in args)
    kwargs = {k: (v.get() if isinstance(v, DataProtoFuture) else v) for k, v in kwargs.items()}
    return args, kwargs


def _record_failure() -> None:
    # Imported lazily: the recorder is a no-op outside a Ray worker group process.
    from verl.single_controller.base.failure_log import record_current_exception

    record_current_exception()


def _accepting_future_refs(func: Callable) -> inspect.Signature:
    """``func``'s signature plus a ``**kwargs`` catch-all, so Ray accepts the lifted future-result keywords
    (see future_args) while still checking the declared parameters."""
    sig = inspect.signature(func)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return sig
    extra = inspect.Parameter("verl_future_refs", inspect.Parameter.VAR_KEYWORD)
    return sig.replace(parameters=[*sig.parameters.values(), extra])


def _original(func: Callable, signature: inspect.Signature) -> Callable:
    """What ``inner.__wrapped__`` points to: ``func`` itself in behaviour (no future resolution, no failure log),
    but carrying the widened signature.

    ``__wrapped__`` lets callers reach the undecorated method (tests call ``Cls.method.__wrapped__(obj, ...)``);
    Ray, however, unwraps a method to its innermost function before reading its signature, so the innermost
    function must accept the lifted future-result keywords too.
    """
    original: Callable[..., Any]
    if inspect.iscoroutinefunction(func):

        async def async_original(*args, **kwargs):
            return await func(*args, **kwargs)

        original = async_original
    else:

        def sync_original(*args, **kwargs):
            return func(*args, **kwargs)

        original = sync_original

    functools.update_wrapper(original, func)  # also copies func's __name__ / __qualname__
    delattr(original, "__wrapped__")
    setattr(original, "__signature__", signature)  # noqa: B010 - function attribute the checker does not know
    return original


def register(
    dispatch_mode: DynamicEnum | dict = Dispatch.ALL_TO_ALL,
    execute_mode: DynamicEnum = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
) -> Callable[[Callable], Callable]:
    """Mark a Worker method as callable on the whole worker group.

    ``dispatch_mode`` picks how arguments are split over ranks and results merged, ``execute_mode`` which ranks
    run, ``blocking=False`` makes the group call return a future (DataProtoFuture for DataProto modes) at once.
    Works on plain and ``async def`` methods.
    """
    _check_dispatch_mode(dispatch_mode)
    _check_execute_mode(execute_mode)
    if not isinstance(blocking, bool):
        raise TypeError(f"register(blocking=...) must be a bool, got {blocking!r}")
    attrs = {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking}

    def decorator(func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"@register must decorate a function, got {type(func).__name__}")
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def inner(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                try:
                    return await func(*args, **kwargs)
                except BaseException:
                    _record_failure()
                    raise

        else:

            @functools.wraps(func)
            def inner(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                try:
                    return func(*args, **kwargs)
                except BaseException:
                    _record_failure()
                    raise

        signature = _accepting_future_refs(func)
        setattr(inner, "__signature__", signature)  # noqa: B010 - function attributes the checker does not know
        setattr(inner, "__wrapped__", _original(func, signature))  # noqa: B010
        setattr(inner, MAGIC_ATTR, dict(attrs))
        return inner

    return decorator


def get_register_attrs(func: Any) -> dict | None:
    """The register() settings of a method, or None when it is not registered."""
    attrs = getattr(func, MAGIC_ATTR, None)
    return attrs if isinstance(attrs, dict) else None
