"""create_colocated_worker_cls: several roles (actor, critic, ref...) living in one process per rank.

Colocating roles lets them share a GPU and swap memory without any inter-process copy. The merged class keeps one
instance per role and exposes each role's registered method ``m`` as ``<role>_m``; ``RayWorkerGroup.spawn``
gives back one group per role with the original names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from verl.single_controller.base.decorator import MAGIC_ATTR, get_register_attrs
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import MESH_QUERY_METHOD
from verl.single_controller.ray.class_with_init_args import RayClassWithInitArgs
from verl.single_controller.ray.worker_group import ROLE_METHODS_ATTR


class ColocatedWorker(Worker):
    """Holds one instance of each role's worker class, built in the order given."""

    def __init__(self, role_specs: dict[str, tuple[type, tuple, dict]]) -> None:
        super().__init__()
        self.worker_dict: dict[str, Worker] = {}
        for role, (cls, args, kwargs) in role_specs.items():
            self.worker_dict[role] = cls(*args, **kwargs)


def _delegate(role: str, name: str, func: Callable, attrs: dict | None) -> Callable:
    if inspect.iscoroutinefunction(func):

        async def method(self, *args, **kwargs):
            return await getattr(self.worker_dict[role], name)(*args, **kwargs)

    else:

        def method(self, *args, **kwargs):
            return getattr(self.worker_dict[role], name)(*args, **kwargs)

    method.__name__ = f"{role}_{name}"
    method.__qualname__ = method.__name__
    method.__doc__ = func.__doc__
    if attrs is not None:
        setattr(method, MAGIC_ATTR, dict(attrs))
    return method


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """Merge several roles into one worker class; pass the result to RayWorkerGroup, then call ``spawn``."""
    if not class_dict:
        raise ValueError("create_colocated_worker_cls needs at least one role")
    role_specs: dict[str, tuple[type, tuple, dict]] = {}
    namespace: dict[str, Any] = {}
    role_methods: dict[str, dict[str, str]] = {}
    options: dict[str, Any] = {}
    option_owner: dict[str, str] = {}
    for role, cls_with_init in class_dict.items():
        if not isinstance(role, str) or not role.isidentifier():
            raise ValueError(f"colocated role names must be identifiers, got {role!r}")
        if not isinstance(cls_with_init, RayClassWithInitArgs):
            raise TypeError(f"role {role!r}: expected a RayClassWithInitArgs, got {type(cls_with_init).__name__}")
        user_cls = cls_with_init.user_cls
        role_specs[role] = (user_cls, cls_with_init.args, cls_with_init.kwargs)
        role_methods[role] = {}
        for name in dir(user_cls):
            if name.startswith("__"):
                continue
            func = getattr(user_cls, name, None)
            attrs = get_register_attrs(func)
            if attrs is None:
                continue
            namespace[f"{role}_{name}"] = _delegate(role, name, func, attrs)
            role_methods[role][name] = f"{role}_{name}"
        namespace[f"{role}_{MESH_QUERY_METHOD}"] = _delegate(role, MESH_QUERY_METHOD, Worker._query_mesh_info, None)
        for key, value in cls_with_init.options.items():
            if key in options and options[key] != value:
                raise ValueError(
                    f"colocated roles {option_owner[key]!r} and {role!r} ask for different Ray option {key!r}: "
                    f"{options[key]!r} vs {value!r}"
                )
            options[key], option_owner[key] = value, role
    clashes = sorted(set(namespace) & set(dir(ColocatedWorker)))
    if clashes:
        raise ValueError(f"colocated method names {clashes} clash with Worker attributes; rename the role or method")
    namespace[ROLE_METHODS_ATTR] = role_methods
    merged = type("Colocated_" + "_".join(class_dict), (ColocatedWorker,), namespace)
    result = RayClassWithInitArgs(merged, role_specs)
    if options:
        result.update_options(options)
    return result
