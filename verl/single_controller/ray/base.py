"""verl's ``verl.single_controller.ray.base`` import path: the Ray backend in one namespace.

The pieces live in their own modules (resource pools, slices of pools, worker groups, colocated roles); recipes
written against verl import them from here.
"""

from verl.single_controller.base import ClassWithInitArgs, ResourcePool, Worker, WorkerGroup
from verl.single_controller.ray.class_with_init_args import RayClassWithInitArgs
from verl.single_controller.ray.class_with_init_args import user_class as _unwrap_ray_remote
from verl.single_controller.ray.colocated import (
    create_colocated_worker_cls,
    create_colocated_worker_cls_fused,
    create_colocated_worker_raw_cls,
)
from verl.single_controller.ray.resource_pool import RayResourcePool, sort_placement_group_by_node_ip
from verl.single_controller.ray.resource_pool_manager import ResourcePoolManager
from verl.single_controller.ray.sub_resource_pool import SubRayResourcePool, merge_resource_pool, split_resource_pool
from verl.single_controller.ray.worker_group import RayWorkerGroup

__all__ = [
    "ClassWithInitArgs",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "ResourcePool",
    "ResourcePoolManager",
    "SubRayResourcePool",
    "Worker",
    "WorkerGroup",
    "_unwrap_ray_remote",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
    "merge_resource_pool",
    "sort_placement_group_by_node_ip",
    "split_resource_pool",
]
