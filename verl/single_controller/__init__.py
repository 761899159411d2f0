"""Single controller: one driver process calls groups of worker processes as if each group were one object."""

from verl import __version__
from verl.single_controller.base import ClassWithInitArgs, ResourcePool, Worker, WorkerGroup
from verl.single_controller.base.decorator import Dispatch, Execute, register

__all__ = [
    "ClassWithInitArgs",
    "Dispatch",
    "Execute",
    "ResourcePool",
    "Worker",
    "WorkerGroup",
    "__version__",
    "register",
]
