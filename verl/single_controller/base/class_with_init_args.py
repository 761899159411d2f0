"""ClassWithInitArgs: a worker class and its constructor arguments, to instantiate later (once per rank)."""

from __future__ import annotations

from typing import Any


class ClassWithInitArgs:
    """Deferred ``cls(*args, **kwargs)``.

    A worker group receives the class and arguments instead of an instance because it builds one instance per rank,
    in processes it starts itself. ``fused_worker_used`` marks a class built by ``create_colocated_worker_cls_fused``
    (several roles in one process).
    """

    def __init__(self, cls: Any, *args: Any, **kwargs: Any) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self.fused_worker_used = False

    def __call__(self) -> Any:
        return self.cls(*self.args, **self.kwargs)
