"""WorkerGroup: call a method on every rank of a group of workers as if the group were one object.

The backend (Ray) supplies how to start one remote call and how to wait for many; everything about splitting
arguments, choosing ranks, merging outputs and stripping padding lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.single_controller.base.class_with_init_args import ClassWithInitArgs
from verl.single_controller.base.decorator import Dispatch, Execute, get_predefined_dispatch_fn, get_register_attrs
from verl.single_controller.base.dispatch import PAD_SIZE_KEY, PerRank, unpad_batch
from verl.single_controller.base.resource_pool import ResourcePool

__all__ = ["ClassWithInitArgs", "ResourcePool", "WorkerGroup"]

# Method of Worker answering (dp_rank, is_collect) for a mesh; prefixed with "<role>_" on colocated workers.
MESH_QUERY_METHOD = "_query_mesh_info"


def _split_for_rank(args: tuple, kwargs: dict, rank: int, world_size: int) -> tuple[tuple, dict]:
    """Rank ``rank``'s arguments: PerRank values are indexed; plain lists of world_size length are indexed too when
    every argument is one (the historical ALL_TO_ALL convention); anything else is broadcast."""
    plain = [v for v in (*args, *kwargs.values()) if not isinstance(v, PerRank)]
    index_plain = bool(plain) and all(isinstance(v, list) and len(v) == world_size for v in plain)

    def pick(value: Any) -> Any:
        if isinstance(value, PerRank):
            if len(value) != world_size:
                raise ValueError(f"per-rank argument has {len(value)} entries for {world_size} ranks")
            return value[rank]
        return value[rank] if index_plain else value

    return tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()}


def _rank_zero_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def pick(value: Any) -> Any:
        return value[0] if isinstance(value, PerRank) else value

    return tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()}


class WorkerGroup:
    """Backend-independent part of a worker group: method binding and the dispatch -> execute -> collect path."""

    def __init__(self, resource_pool: Any = None, **kwargs) -> None:
        self._is_init_with_detached_workers = resource_pool is None
        self._workers: list[Any] = []
        self._worker_names: list[str] = []
        self._method_prefix = ""
        self._bound_methods: dict[str, str] = {}
        self._mesh_cache: dict[str, list[tuple[int, bool]]] = {}
        self.role = kwargs.get("role") or "worker"

    # -- to implement in a backend ------------------------------------------------------------------------------
    def _remote_call(self, rank: int, method_name: str, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def _wait(self, method_name: str, handles: list, ranks: list[int]) -> list:
        raise NotImplementedError

    def _make_data_proto_future(self, method_name: str, handles: list, ranks: list[int], pad_size: int) -> Any:
        raise NotImplementedError

    def _check_usable(self) -> None:
        """Raise if the group can no longer serve calls (e.g. a worker died)."""

    def _share_objects(self, calls: list[tuple[tuple, dict]]) -> list[tuple[tuple, dict]]:
        """Backend hook: the per-rank calls, where a backend may replace an object several ranks receive by a
        shared reference (so it is serialised once). Default: unchanged."""
        return calls

    # -- introspection ------------------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return len(self._workers)

    @property
    def workers(self) -> list[Any]:
        return self._workers

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names

    @property
    def bound_methods(self) -> dict[str, str]:
        """Group-level method name -> remote method name, for every bound registered method."""
        return dict(self._bound_methods)

    # -- raw execution ------------------------------------------------------------------------------------------
    def execute_all_async(self, method_name: str, *args, **kwargs) -> list:
        self._check_usable()
        n = self.world_size
        calls = self._share_objects([_split_for_rank(args, kwargs, rank, n) for rank in range(n)])
        return [self._remote_call(rank, method_name, a, k) for rank, (a, k) in enumerate(calls)]

    def execute_all_sync(self, method_name: str, *args, **kwargs) -> list:
        handles = self.execute_all_async(method_name, *args, **kwargs)
        return self._wait(method_name, handles, list(range(self.world_size)))

    def execute_rank_zero_async(self, method_name: str, *args, **kwargs) -> Any:
        self._check_usable()
        a, k = _rank_zero_args(args, kwargs)
        return self._remote_call(0, method_name, a, k)

    def execute_rank_zero_sync(self, method_name: str, *args, **kwargs) -> Any:
        return self._wait(method_name, [self.execute_rank_zero_async(method_name, *args, **kwargs)], [0])[0]

    execute_all = execute_all_async
    execute_rank_zero = execute_rank_zero_async

    # -- mesh info ----------------------------------------------------------------------------------------------
    def _mesh_info(self, mesh_name: str) -> list[tuple[int, bool]]:
        if mesh_name not in self._mesh_cache:
            infos = self.execute_all_sync(self._method_prefix + MESH_QUERY_METHOD, mesh_name)
            self._mesh_cache[mesh_name] = [(int(dp), bool(keep)) for dp, keep in infos]
        return self._mesh_cache[mesh_name]

    def _query_dispatch_info(self, mesh_name: str) -> list[int]:
        """Each rank's data-parallel rank on ``mesh_name`` (asked once, then cached)."""
        return [dp for dp, _ in self._mesh_info(mesh_name)]

    def _query_collect_info(self, mesh_name: str) -> list[bool]:
        """Whether each rank's output is kept on ``mesh_name``."""
        return [keep for _, keep in self._mesh_info(mesh_name)]

    # -- binding ------------------------------------------------------------------------------------------------
    def _bind_worker_method(self, user_defined_cls: type, prefix: str = "") -> list[str]:
        """Expose every ``@register`` method of ``user_defined_cls`` on this group (names starting with ``prefix``,
        with the prefix stripped). Returns the group-level names."""
        bound = []
        for name in dir(user_defined_cls):
            if name.startswith("__") or (prefix and not name.startswith(prefix)):
                continue
            attrs = get_register_attrs(getattr(user_defined_cls, name, None))
            if attrs is None:
                continue
            group_name = name[len(prefix) :]
            rebinding = group_name in self._bound_methods
            if hasattr(type(self), group_name) or (group_name in self.__dict__ and not rebinding):
                raise ValueError(
                    f"registered method {name!r} of {user_defined_cls.__name__} clashes with the worker group "
                    f"attribute {group_name!r}; rename the method"
                )
            setattr(self, group_name, self._make_group_method(name, attrs))
            self._bound_methods[group_name] = name
            bound.append(group_name)
        return bound

    def _make_group_method(self, remote_name: str, attrs: dict) -> Callable:
        dispatch_mode = attrs["dispatch_mode"]
        fns = get_predefined_dispatch_fn(dispatch_mode)
        execute_mode = Execute.RANK_ZERO if dispatch_mode is Dispatch.RANK_ZERO else attrs["execute_mode"]
        blocking = attrs["blocking"]

        def group_method(*args, **kwargs):
            return self._call(remote_name, fns["dispatch_fn"], fns["collect_fn"], execute_mode, blocking, args, kwargs)

        group_method.__name__ = remote_name
        group_method.__qualname__ = f"{type(self).__name__}.{remote_name}"
        return group_method

    def _call(
        self,
        method_name: str,
        dispatch_fn: Callable,
        collect_fn: Callable,
        execute_mode: Any,
        blocking: bool,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        self._check_usable()
        args, kwargs = dispatch_fn(self, *args, **kwargs)
        pad_size = kwargs.pop(PAD_SIZE_KEY, 0)
        rank_zero = execute_mode is Execute.RANK_ZERO
        if rank_zero:
            ranks = [0]
            handles = [self.execute_rank_zero_async(method_name, *args, **kwargs)]
        else:
            ranks = list(range(self.world_size))
            handles = self.execute_all_async(method_name, *args, **kwargs)

        if not blocking:
            output_ranks = getattr(collect_fn, "data_proto_output_ranks", None)
            if output_ranks is not None and not rank_zero:
                chosen = output_ranks(self)
                return self._make_data_proto_future(method_name, [handles[r] for r in chosen], chosen, pad_size)
            return collect_fn(self, handles[0] if rank_zero else handles)

        values = self._wait(method_name, handles, ranks)
        output = collect_fn(self, values[0] if rank_zero else values)
        return unpad_batch(output, pad_size)
