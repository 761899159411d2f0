"""ResourcePoolManager: named pools of process slots and which role runs in which pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from verl.single_controller.ray.resource_pool import (
    CPU_PER_PROCESS_ENV,
    DEFAULT_CPUS_PER_PROCESS_CPU_ONLY,
    RayResourcePool,
    _env_float,
)

_DEVICES = ("auto", "cpu", "cuda")


@dataclass
class ResourcePoolManager:
    """``resource_pool_spec``: pool name -> processes per node (e.g. {"global_pool": [8, 8]});
    ``mapping``: role -> pool name. ``device`` follows ``trainer.device``: "auto" uses GPUs when the Ray cluster
    has any, "cpu" places CPU-only slots (fractional cores), "cuda" requires GPUs. ``max_colocate_count`` worker
    groups may share each slot (a colocated hybrid group counts as one)."""

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Any, str]
    max_colocate_count: int = 3
    resource_pool_dict: dict[str, RayResourcePool] = field(default_factory=dict)
    device: str = "auto"
    cpus_per_process: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.resource_pool_spec, dict) or not self.resource_pool_spec:
            raise ValueError("resource_pool_spec must be a non-empty dict of pool name -> processes per node")
        for name, nodes in self.resource_pool_spec.items():
            if (
                not isinstance(nodes, list | tuple)
                or not nodes
                or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in nodes)
            ):
                raise ValueError(
                    f"resource_pool_spec[{name!r}] must be a non-empty list of positive ints, got {nodes!r}"
                )
        for role, pool in self.mapping.items():
            if pool not in self.resource_pool_spec:
                raise ValueError(
                    f"mapping[{role}] names pool {pool!r}, which is not in resource_pool_spec "
                    f"{sorted(self.resource_pool_spec)}"
                )
        if self.device not in _DEVICES:
            raise ValueError(f"device must be one of {_DEVICES}, got {self.device!r}")

    def _use_gpu(self) -> bool:
        gpus = ray.cluster_resources().get("GPU", 0)
        if self.device == "cuda" and gpus <= 0:
            raise RuntimeError("device='cuda' but the Ray cluster has no GPU; use device='cpu' or 'auto'")
        return self.device == "cuda" or (self.device == "auto" and gpus > 0)

    def create_resource_pool(self) -> None:
        """Create one RayResourcePool per spec entry (checking the cluster can host them first)."""
        use_gpu = self._use_gpu()
        self._check_resource_available(use_gpu)
        for name, nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = RayResourcePool(
                process_on_nodes=list(nodes),
                use_gpu=use_gpu,
                name_prefix=name,
                max_colocate_count=self.max_colocate_count,
                cpus_per_process=self.cpus_per_process,
            )
        self._plan_nodes()

    def _plan_nodes(self) -> None:
        """Pin every pool's entries to nodes of their own, pools in spec order: a later pool (the standalone
        rollout) prefers nodes no earlier pool took (see ``node_placement``)."""
        from verl.single_controller.ray.node_placement import alive_nodes, free_resources

        nodes = alive_nodes()
        free, taken = free_resources(nodes), set[str]()
        for pool in self.resource_pool_dict.values():
            pool.plan_nodes(nodes, free, taken)

    def placement(self) -> dict[str, list[str | None]]:
        """Pool name -> the node id each of its entries is pinned to (None: placed by Ray); for logs and tests."""
        return {name: list(pool.node_ids or []) for name, pool in self.resource_pool_dict.items()}

    def release_all(self) -> None:
        """Remove every pool's placement groups (their workers die with them). Placement groups outlive the actor
        that created them, so a runner that trains more than once in one Ray job must call this when done."""
        for pool in self.resource_pool_dict.values():
            pool.release()
        self.resource_pool_dict.clear()

    def get_resource_pool(self, role: Any) -> RayResourcePool:
        if role not in self.mapping:
            raise KeyError(f"role {role} has no resource pool in mapping (roles: {[str(r) for r in self.mapping]})")
        name = self.mapping[role]
        if name not in self.resource_pool_dict:
            raise RuntimeError(f"resource pool {name!r} for role {role} is not created; call create_resource_pool()")
        return self.resource_pool_dict[name]

    def get_n_gpus(self) -> int:
        """Total worker processes over all pools (GPUs on a GPU cluster)."""
        return sum(sum(nodes) for nodes in self.resource_pool_spec.values())

    def _check_resource_available(self, use_gpu: bool | None = None) -> None:
        """Fail early, naming the pool, when the cluster cannot host the requested processes."""
        use_gpu = self._use_gpu() if use_gpu is None else use_gpu
        available = ray.available_resources()
        if use_gpu:
            free = sorted(
                (int(node.get("Resources", {}).get("GPU", 0)) for node in ray.nodes() if node.get("Alive")),
                reverse=True,
            )
            for name, nodes in self.resource_pool_spec.items():
                for need in sorted(nodes, reverse=True):
                    slot = next((i for i, have in enumerate(free) if have >= need), None)
                    if slot is None:
                        raise ValueError(
                            f"resource pool {name!r} needs a node with {need} free GPU(s); nodes have {free} GPU(s)"
                        )
                    free[slot] -= need
            return
        per_process = self.cpus_per_process
        if per_process is None:
            per_process = _env_float(CPU_PER_PROCESS_ENV, DEFAULT_CPUS_PER_PROCESS_CPU_ONLY)
        need_cpu = per_process * self.get_n_gpus()
        have = available.get("CPU", 0)
        if need_cpu > have + 1e-9:
            raise ValueError(
                f"resource pools {sorted(self.resource_pool_spec)} need {need_cpu:g} CPU for {self.get_n_gpus()} "
                f"processes but the cluster has {have:g} available; lower cpus_per_process or the process counts"
            )
