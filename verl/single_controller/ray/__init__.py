"""Ray backend of the single controller: resource pools, worker groups, colocated roles."""

from verl.single_controller.ray.class_with_init_args import RayClassWithInitArgs
from verl.single_controller.ray.colocated import (
    create_colocated_worker_cls,
    create_colocated_worker_cls_fused,
    create_colocated_worker_raw_cls,
)
from verl.single_controller.ray.errors import WorkerDiedError, WorkerError, WorkerTimeoutError
from verl.single_controller.ray.resource_pool import RayResourcePool
from verl.single_controller.ray.resource_pool_manager import ResourcePoolManager
from verl.single_controller.ray.sub_resource_pool import SubRayResourcePool, merge_resource_pool, split_resource_pool
from verl.single_controller.ray.worker_group import RayWorkerGroup

__all__ = [
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "ResourcePoolManager",
    "SubRayResourcePool",
    "WorkerDiedError",
    "WorkerError",
    "WorkerTimeoutError",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
    "merge_resource_pool",
    "split_resource_pool",
]
