"""Send DataProtoFuture arguments as task dependencies instead of objects a worker must block on.

A worker that calls ``future.get()`` blocks its own process; in an actor that also serves the producing call
(async actors, or colocated roles) that can deadlock. Lifting each referenced result into its own top-level
keyword argument lets the backend wait for it before the task starts, and the worker rebuilds the DataProto.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_REF_KEY = "__verl_future_ref_{}__"


class FutureSlot:
    """Stands in for a DataProtoFuture argument; ``keys`` name the keyword arguments holding its results."""

    def __init__(self, keys: list[str], collect_fn: Callable, dispatch_fn: Callable | None) -> None:
        self.keys = keys
        self.collect_fn = collect_fn
        self.dispatch_fn = dispatch_fn

    def build(self, values: list[Any]) -> Any:
        data = self.collect_fn(values)
        return self.dispatch_fn(data) if self.dispatch_fn is not None else data


def lift_future_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Replace every top-level DataProtoFuture by a FutureSlot and add its object refs as keyword arguments."""
    from verl.protocol import DataProtoFuture

    if not any(isinstance(v, DataProtoFuture) for v in (*args, *kwargs.values())):
        return args, kwargs
    new_kwargs: dict[str, Any] = {}
    counter = [0]

    def lift(value: Any) -> Any:
        if not isinstance(value, DataProtoFuture):
            return value
        keys = []
        for ref in value.futures:
            key = _REF_KEY.format(counter[0])
            counter[0] += 1
            new_kwargs[key] = ref
            keys.append(key)
        return FutureSlot(keys, value.collect_fn, value.dispatch_fn)

    lifted_args = tuple(lift(a) for a in args)
    lifted_kwargs = {k: lift(v) for k, v in kwargs.items()}
    lifted_kwargs.update(new_kwargs)
    return lifted_args, lifted_kwargs


def resolve_future_slots(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Inverse of lift_future_args, run in the worker once the backend has fetched the results."""
    if not any(isinstance(v, FutureSlot) for v in (*args, *kwargs.values())):
        return args, kwargs
    kwargs = dict(kwargs)
    values = {k: kwargs.pop(k) for k in [k for k in kwargs if k.startswith("__verl_future_ref_")]}

    def resolve(value: Any) -> Any:
        if not isinstance(value, FutureSlot):
            return value
        missing = [k for k in value.keys if k not in values]
        if missing:
            raise RuntimeError(f"future argument results {missing} did not arrive with the call")
        return value.build([values[k] for k in value.keys])

    return tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()}
