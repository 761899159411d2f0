"""Single controller: one driver process calls groups of worker processes as if each group were one object."""

from verl.single_controller.base import ResourcePool, Worker, WorkerGroup
from verl.single_controller.base.decorator import Dispatch, Execute, register

__all__ = ["Dispatch", "Execute", "ResourcePool", "Worker", "WorkerGroup", "register"]
