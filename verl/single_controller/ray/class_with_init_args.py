"""RayClassWithInitArgs: a worker class plus its constructor arguments, instantiated later as Ray actors."""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.single_controller.base.class_with_init_args import ClassWithInitArgs
from verl.single_controller.base.worker import Worker

# Class attribute of a colocated class: the Ray actor options its roles asked for (see colocated.py).
ROLE_OPTIONS_ATTR = "_verl_role_options"


def user_class(cls: Any) -> type:
    """The class behind ``ray.remote(cls)`` (``cls`` itself when it is not a Ray actor class)."""
    inner = getattr(cls, "__ray_actor_class__", None)
    return inner if inner is not None else cls


class RayClassWithInitArgs(ClassWithInitArgs):
    """Deferred ``cls(*args, **kwargs)`` for every rank of a worker group.

    ``cls`` may be a Worker subclass or ``ray.remote(WorkerSubclass)``; ``update_options`` adds Ray actor options
    (runtime_env, max_concurrency, ...) applied to every actor, ``set_additional_resource`` custom Ray resources
    each actor must hold.
    """

    def __init__(self, cls: Any, *args, **kwargs) -> None:
        user_cls = user_class(cls)
        if not (isinstance(user_cls, type) and issubclass(user_cls, Worker)):
            raise TypeError(
                f"RayClassWithInitArgs needs a subclass of verl.single_controller.base.Worker, got {user_cls!r}"
            )
        super().__init__(cls if hasattr(cls, "__ray_actor_class__") else ray.remote(user_cls), *args, **kwargs)
        self.user_cls = user_cls
        self._options: dict[str, Any] = dict(getattr(user_cls, ROLE_OPTIONS_ATTR, None) or {})
        self._additional_resource: dict[str, float] = {}

    def update_options(self, options: dict[str, Any]) -> None:
        if not isinstance(options, dict):
            raise TypeError(f"update_options needs a dict of Ray actor options, got {type(options).__name__}")
        self._options.update(options)

    def set_additional_resource(self, additional_resource: dict[str, float]) -> None:
        """Custom Ray resources (``{"my_accelerator": 1}``) every actor of the group must hold."""
        if not isinstance(additional_resource, dict):
            raise TypeError(f"set_additional_resource needs a dict, got {type(additional_resource).__name__}")
        self._additional_resource = dict(additional_resource)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self._options)

    def __call__(
        self,
        placement_group: Any = None,
        placement_group_bundle_idx: int = 0,
        env_vars: dict[str, str] | None = None,
        name: str | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        detached: bool = False,
        runtime_env: dict[str, Any] | None = None,
        use_gpu: bool = True,
    ) -> Any:
        """Start one actor, in ``placement_group`` bundle ``placement_group_bundle_idx`` when given.

        ``env_vars`` and ``runtime_env`` are merged over the ``runtime_env`` option (their keys win);
        ``use_gpu=False`` drops the GPU share.
        """
        options = dict(self._options)
        merged_runtime_env = dict(options.pop("runtime_env", None) or {})
        merged_env = dict(merged_runtime_env.get("env_vars", {}))
        for key, value in (runtime_env or {}).items():
            if key == "env_vars":
                merged_env.update(value)
            else:
                merged_runtime_env[key] = value
        merged_env.update(env_vars or {})
        if merged_env:
            merged_runtime_env["env_vars"] = merged_env
        if merged_runtime_env:
            options["runtime_env"] = merged_runtime_env
        if placement_group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            )
        if num_cpus is not None:
            options["num_cpus"] = num_cpus
        if num_gpus is not None and use_gpu:
            options["num_gpus"] = num_gpus
        if self._additional_resource:
            options["resources"] = {**options.get("resources", {}), **self._additional_resource}
        if name is not None:
            options["name"] = name
        if detached:
            options["lifetime"] = "detached"
        return self.cls.options(**options).remote(*self.args, **self.kwargs)
