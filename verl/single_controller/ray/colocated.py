"""Several roles (actor, critic, ref...) living in one process per rank.

Colocating roles lets them share a GPU and swap memory without any inter-process copy. The merged class builds one
instance per role, in the order given, and reaches it as ``self.<role>`` or ``self.worker_dict[role]`` (each role
sees the others through ``fused_worker_dict``). A role's registered method ``m`` is exposed on the merged class as
``<role>_m``; ``RayWorkerGroup.spawn`` (or ``fuse``) gives back one group per role with the original names.

Three entry points, as in verl: ``create_colocated_worker_cls`` and ``create_colocated_worker_cls_fused`` return a
``RayClassWithInitArgs`` ready for a RayWorkerGroup; ``create_colocated_worker_raw_cls`` returns the class itself,
for subclassing (a hybrid worker adding methods that use several roles).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, get_register_attrs
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import MESH_QUERY_METHOD
from verl.single_controller.ray.class_with_init_args import ROLE_OPTIONS_ATTR, RayClassWithInitArgs
from verl.single_controller.ray.worker_group import ROLE_METHODS_ATTR

__all__ = [
    "ColocatedWorker",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
]

# Separates role and method in the names ``_fuw_execute`` takes ("actor_fwmn_update"), verl's convention.
FUSED_METHOD_SEPARATOR = "_fwmn_"


class ColocatedWorker(Worker):
    """Holds one instance of each role's worker class (``_role_specs``, filled in by the factories below)."""

    _role_specs: ClassVar[dict[str, tuple[type, tuple, dict]]] = {}
    is_fused_worker: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_dict = self.fused_worker_dict
        for role, (cls, role_args, role_kwargs) in type(self)._role_specs.items():
            worker = cls(*role_args, **role_kwargs)
            self.fused_worker_dict[role] = worker
            setattr(self, role, worker)
        for worker in self.fused_worker_dict.values():
            setattr(worker, Worker.fused_worker_attr_name, self.fused_worker_dict)

    def _fuw_execute(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` of ``role`` given ``"<role>_fwmn_<method>"``."""
        role, sep, method = method_name.partition(FUSED_METHOD_SEPARATOR)
        if not sep or role not in self.fused_worker_dict:
            raise ValueError(
                f"_fuw_execute({method_name!r}): expected '<role>{FUSED_METHOD_SEPARATOR}<method>' with a role in "
                f"{sorted(self.fused_worker_dict)}"
            )
        return getattr(self.fused_worker_dict[role], method)(*args, **kwargs)


def _delegate(role: str, name: str, func: Callable, attrs: dict | None, exposed_as: str) -> Callable:
    method: Callable[..., Any]
    if inspect.iscoroutinefunction(func):

        async def async_method(self, *args, **kwargs):
            return await getattr(self.worker_dict[role], name)(*args, **kwargs)

        method = async_method
    else:

        def sync_method(self, *args, **kwargs):
            return getattr(self.worker_dict[role], name)(*args, **kwargs)

        method = sync_method

    method.__name__ = exposed_as
    method.__qualname__ = exposed_as
    method.__doc__ = func.__doc__
    if attrs is not None:
        setattr(method, MAGIC_ATTR, dict(attrs))
    return method


def _is_direct_rollout(attrs: dict) -> bool:
    return attrs.get("dispatch_mode") is Dispatch.DIRECT_ROLLOUT_METHOD


def _merge(class_dict: dict[str, RayClassWithInitArgs], factory: str, prefix: str = "FusedWorker") -> type:
    """The merged class (named ``<prefix>_<roles>``, which error messages show); it carries the Ray options its
    roles agree on."""
    if not class_dict:
        raise ValueError(f"{factory} needs at least one role")
    role_specs: dict[str, tuple[type, tuple, dict]] = {}
    namespace: dict[str, Any] = {}
    owner: dict[str, str] = {}
    role_methods: dict[str, dict[str, str]] = {}
    options: dict[str, Any] = {}
    option_owner: dict[str, str] = {}

    def add(exposed: str, role: str, method: Callable) -> None:
        if exposed in namespace:
            raise ValueError(
                f"{factory}: method {exposed!r} of role {role!r} clashes with one of role "
                f"{owner[exposed]!r}; rename the role or method"
            )
        namespace[exposed], owner[exposed] = method, role

    for role, cls_with_init in class_dict.items():
        if not isinstance(role, str) or not role.isidentifier():
            raise ValueError(f"{factory}: colocated role names must be identifiers, got {role!r}")
        if not isinstance(cls_with_init, RayClassWithInitArgs):
            raise TypeError(
                f"{factory}: role {role!r} needs a RayClassWithInitArgs, got {type(cls_with_init).__name__}"
            )
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
            assert func is not None  # it carries register() settings
            add(f"{role}_{name}", role, _delegate(role, name, func, attrs, f"{role}_{name}"))
            role_methods[role][name] = f"{role}_{name}"
            if _is_direct_rollout(attrs) and "rollout" in role:
                # called on one actor handle by rollout clients, who know nothing of the role prefix
                add(name, role, _delegate(role, name, func, attrs, name))
        add(
            f"{role}_{MESH_QUERY_METHOD}",
            role,
            _delegate(role, MESH_QUERY_METHOD, Worker._query_mesh_info, None, f"{role}_{MESH_QUERY_METHOD}"),
        )
        for key, value in cls_with_init.options.items():
            if key in options and options[key] != value:
                raise ValueError(
                    f"{factory}: colocated roles {option_owner[key]!r} and {role!r} ask for different Ray option "
                    f"{key!r}: {options[key]!r} vs {value!r}"
                )
            options[key], option_owner[key] = value, role
    clashes = sorted((set(namespace) | set(role_specs)) & set(dir(ColocatedWorker)))
    if clashes:
        raise ValueError(f"{factory}: role or method names {clashes} clash with Worker attributes; rename them")
    namespace[ROLE_METHODS_ATTR] = role_methods
    namespace["_role_specs"] = role_specs
    namespace["raw_cls_dict"] = {role: spec[0] for role, spec in role_specs.items()}
    namespace[ROLE_OPTIONS_ATTR] = options  # RayClassWithInitArgs of the class (or a subclass) starts from these
    return type("_".join([prefix, *class_dict]), (ColocatedWorker,), namespace)


def _with_init_args(merged: type, fused: bool) -> RayClassWithInitArgs:
    result = RayClassWithInitArgs(merged)
    result.fused_worker_used = fused
    return result


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """Merge several roles into one worker class; pass the result to RayWorkerGroup, then call ``spawn``."""
    return _with_init_args(_merge(class_dict, "create_colocated_worker_cls", prefix="Colocated"), fused=False)


def create_colocated_worker_cls_fused(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """Like ``create_colocated_worker_cls``, marked fused: the group's ``fuse(roles)`` exposes ``group.<role>``."""
    return _with_init_args(_merge(class_dict, "create_colocated_worker_cls_fused"), fused=True)


def create_colocated_worker_raw_cls(class_dict: dict[str, RayClassWithInitArgs]) -> type:
    """The merged Worker class itself, to subclass (wrap the subclass in ``ray.remote`` / RayClassWithInitArgs, and
    set ``fused_worker_used = True`` on the latter to use the group's ``fuse``)."""
    return _merge(class_dict, "create_colocated_worker_raw_cls")
