"""Backend-independent single-controller pieces: Worker, WorkerGroup, @register, Dispatch, Execute."""

from verl.single_controller.base.class_with_init_args import ClassWithInitArgs
from verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    register,
    register_dispatch_mode,
    update_dispatch_mode,
)
from verl.single_controller.base.dispatch import PerRank, make_nd_compute_dataproto_dispatch_fn
from verl.single_controller.base.resource_pool import ResourcePool
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import WorkerGroup

__all__ = [
    "ClassWithInitArgs",
    "Dispatch",
    "Execute",
    "PerRank",
    "ResourcePool",
    "Worker",
    "WorkerGroup",
    "make_nd_compute_dataproto_dispatch_fn",
    "register",
    "register_dispatch_mode",
    "update_dispatch_mode",
]
