"""RayClassWithInitArgs: a worker class plus its constructor arguments, instantiated later as Ray actors."""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.single_controller.base.worker import Worker


def _user_class(cls: Any) -> type:
    inner = getattr(cls, "__ray_actor_class__", None)
    return inner if inner is not None else cls


class RayClassWithInitArgs:
    """Deferred ``cls(*args, **kwargs)`` for every rank of a worker group.

    ``cls`` may be a Worker subclass or ``ray.remote(WorkerSubclass)``; ``update_options`` adds Ray actor options
    (runtime_env, max_concurrency, ...) applied to every actor.
    """

    def __init__(self, cls: Any, *args, **kwargs) -> None:
        user_cls = _user_class(cls)
        if not (isinstance(user_cls, type) and issubclass(user_cls, Worker)):
            raise TypeError(
                f"RayClassWithInitArgs needs a subclass of verl.single_controller.base.Worker, got {user_cls!r}"
            )
        self.user_cls = user_cls
        self.cls = cls if hasattr(cls, "__ray_actor_class__") else ray.remote(user_cls)
        self.args = args
        self.kwargs = kwargs
        self._options: dict[str, Any] = {}

    def update_options(self, options: dict[str, Any]) -> None:
        if not isinstance(options, dict):
            raise TypeError(f"update_options needs a dict of Ray actor options, got {type(options).__name__}")
        self._options.update(options)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self._options)

    def __call__(self, placement_group: Any = None, placement_group_bundle_idx: int = 0,
                 env_vars: dict[str, str] | None = None, name: str | None = None, num_cpus: float | None = None,
                 num_gpus: float | None = None, detached: bool = False) -> Any:
        """Start one actor, in ``placement_group`` bundle ``placement_group_bundle_idx`` when given."""
        options = dict(self._options)
        runtime_env = dict(options.pop("runtime_env", None) or {})
        merged_env = dict(runtime_env.get("env_vars", {}))
        merged_env.update(env_vars or {})
        if merged_env:
            runtime_env["env_vars"] = merged_env
        if runtime_env:
            options["runtime_env"] = runtime_env
        if placement_group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            )
        if num_cpus is not None:
            options["num_cpus"] = num_cpus
        if num_gpus is not None:
            options["num_gpus"] = num_gpus
        if name is not None:
            options["name"] = name
        if detached:
            options["lifetime"] = "detached"
        return self.cls.options(**options).remote(*self.args, **self.kwargs)
