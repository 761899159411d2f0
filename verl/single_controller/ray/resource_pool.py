"""RayResourcePool: placement groups reserving one slot per worker process, on GPU nodes or CPU-only clusters."""

from __future__ import annotations

import os
import uuid

import ray
from ray.exceptions import GetTimeoutError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from verl.single_controller.base.resource_pool import ResourcePool
from verl.single_controller.ray.node_placement import NODE_ID_LABEL

CPU_PER_PROCESS_ENV = "VERL_CPUS_PER_PROCESS"
# A CPU-only slot reserves a quarter core: a 2-core laptop hosts 8 worker processes. GPU slots reserve one core
# next to their GPU.
DEFAULT_CPUS_PER_PROCESS_CPU_ONLY = 0.25
DEFAULT_CPUS_PER_PROCESS_GPU = 1.0
PLACEMENT_TIMEOUT_ENV = "VERL_PLACEMENT_TIMEOUT_S"
DEFAULT_PLACEMENT_TIMEOUT_S = 120.0


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"environment variable {name} must be > 0, got {raw!r}")
    return value


def _node_ip_of(pg: PlacementGroup, node_ips: dict[str, str]) -> str:
    node_ids = ray.util.placement_group_table(pg).get("bundles_to_node_id") or {}
    first = node_ids.get(0) if isinstance(node_ids, dict) else None
    return "" if first is None else node_ips.get(first, "")


def _sorted_by_node_ip(pgs: list[PlacementGroup], store: list[int]) -> tuple[list[PlacementGroup], list[int]]:
    """Placement groups (with their process counts) ordered by the IP of the node they landed on.

    A rank's shards of a sharded checkpoint are written to its node's local disk; ordering by node keeps every rank
    on the same node when a run is restarted on the same machines, so it finds its shards again.
    """
    if len(pgs) < 2:
        return pgs, store
    try:
        node_ips = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
        keys = [_node_ip_of(pg, node_ips) for pg in pgs]
    except Exception:  # noqa: BLE001 - ordering is a convenience; keep creation order when Ray cannot tell
        return pgs, store
    order = sorted(range(len(pgs)), key=lambda i: keys[i])
    return [pgs[i] for i in order], [store[i] for i in order]


def sort_placement_group_by_node_ip(pgs: list[PlacementGroup]) -> list[PlacementGroup]:
    """``pgs`` ordered by the IP of the node each one landed on (see ``RayResourcePool.get_placement_groups``)."""
    return _sorted_by_node_ip(list(pgs), [0] * len(pgs))[0]


class RayResourcePool(ResourcePool):
    """One placement group per node entry of ``process_on_nodes``; bundle i of a group is the slot of local rank i.

    ``use_gpu=True``: each slot holds 1 GPU and ``cpus_per_process`` CPUs. ``use_gpu=False``: each slot holds only
    ``cpus_per_process`` CPUs (default 0.25, or $VERL_CPUS_PER_PROCESS). Up to ``max_colocate_count`` worker groups may
    share a slot; each of their actors takes 1/max_colocate_count of it. Names get a random suffix so a second run
    in the same cluster never collides with the first.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        accelerator_type: str | None = None,
        cpus_per_process: float | None = None,
        placement_timeout_s: float | None = None,
    ) -> None:
        super().__init__(process_on_nodes, max_colocate_count)
        if not self.store:
            raise ValueError("RayResourcePool needs process_on_nodes with at least one node, e.g. [2]")
        self.use_gpu = bool(use_gpu)
        default_cpus = DEFAULT_CPUS_PER_PROCESS_GPU if self.use_gpu else DEFAULT_CPUS_PER_PROCESS_CPU_ONLY
        if cpus_per_process is None:
            cpus_per_process = _env_float(CPU_PER_PROCESS_ENV, default_cpus)
        if not isinstance(cpus_per_process, int | float) or cpus_per_process <= 0:
            raise ValueError(f"cpus_per_process must be > 0, got {cpus_per_process!r}")
        self.cpus_per_process = float(cpus_per_process)
        self.name_prefix = f"{name_prefix or 'verl_pool'}_{uuid.uuid4().hex[:8]}"
        self.detached = detached
        self.accelerator_type = accelerator_type
        self.placement_timeout_s = placement_timeout_s or _env_float(PLACEMENT_TIMEOUT_ENV, DEFAULT_PLACEMENT_TIMEOUT_S)
        self.pgs: list[PlacementGroup] | None = None
        # node id each entry of process_on_nodes is pinned to (None: Ray places it); planned by the
        # ResourcePoolManager across its pools, or by get_placement_groups for a pool on its own
        self.node_ids: list[str | None] | None = None

    def plan_nodes(self, nodes: list | None = None, free: dict | None = None, taken: set[str] | None = None) -> None:
        """Pin each entry of ``process_on_nodes`` to a node of its own (see ``node_placement``); the manager passes
        the cluster view it shares between pools, a pool on its own reads the cluster here."""
        from verl.single_controller.ray.node_placement import (
            alive_nodes,
            assign_nodes,
            free_resources,
            label_selectors_supported,
        )

        if not label_selectors_supported():
            self.node_ids = [None] * len(self.store)
            return
        nodes = alive_nodes() if nodes is None else nodes
        free = free_resources(nodes) if free is None else free
        requests = [{key: amount * count for key, amount in self.bundle().items()} for count in self.store]
        self.node_ids = assign_nodes(requests, nodes, free, set() if taken is None else taken)

    def bundle(self) -> dict[str, float]:
        """Resources of one process slot."""
        b: dict[str, float] = {"CPU": self.cpus_per_process}
        if self.use_gpu:
            b["GPU"] = 1
            if self.accelerator_type:
                b[f"accelerator_type:{self.accelerator_type}"] = 1e-3
        return b

    def actor_resources(self, use_gpu: bool | None = None) -> dict[str, float]:
        """num_cpus / num_gpus of one actor: a 1/max_colocate_count share of its slot (``use_gpu=False``: no GPU
        share even on a GPU pool, for a helper process next to the GPU workers)."""
        share = {"num_cpus": self.cpus_per_process / self.max_colocate_count}
        if self.use_gpu and use_gpu is not False:
            share["num_gpus"] = 1.0 / self.max_colocate_count
        return share

    def bundle_slots(self, pgs: list[PlacementGroup] | None = None) -> list[tuple[PlacementGroup, int]]:
        """``(placement group, bundle index)`` of every process slot this pool hands out, in rank order."""
        pgs = self.get_placement_groups() if pgs is None else pgs
        return [(pg, bundle) for pg, count in zip(pgs, self.store) for bundle in range(count)]

    def get_placement_groups(
        self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str | None = None
    ) -> list[PlacementGroup]:
        """Create (once) and wait for the placement groups; a clear error if the cluster cannot host them."""
        if self.pgs is not None:
            return self.pgs
        prefix = name or self.name_prefix
        lifetime = "detached" if self.detached else None
        if self.node_ids is None:
            self.plan_nodes()
        assert self.node_ids is not None  # plan_nodes always sets it
        pgs = []
        for i, (count, node_id) in enumerate(zip(self.store, self.node_ids)):
            pinned = {} if node_id is None else {"bundle_label_selector": [{NODE_ID_LABEL: node_id}] * count}
            pgs.append(
                placement_group(
                    [self.bundle() for _ in range(count)],
                    strategy=strategy,
                    name=f"{prefix}_pg{i}",
                    lifetime=lifetime,
                    **pinned,
                )
            )
        try:
            ray.get([pg.ready() for pg in pgs], timeout=self.placement_timeout_s)
        except GetTimeoutError:
            for pg in pgs:
                remove_placement_group(pg)
            raise TimeoutError(
                f"resource pool {self.name_prefix!r}: could not reserve {self.store} process slot(s) of "
                f"{self.bundle()} within {self.placement_timeout_s:g}s (pinned to nodes {self.node_ids}); cluster "
                f"has {ray.available_resources()} "
                f"available (lower cpus_per_process / ${CPU_PER_PROCESS_ENV}, or the process counts)"
            ) from None
        if not any(self.node_ids):  # pinned entries keep the planned order (head node first)
            pgs, self._store = _sorted_by_node_ip(pgs, self._store)
        self.pgs = pgs
        return pgs

    def release(self) -> None:
        """Give the reserved slots back to the cluster (actors placed in them are killed by Ray)."""
        for pg in self.pgs or []:
            try:
                remove_placement_group(pg)
            except Exception:
                pass
        self.pgs = None
        self.node_ids = None
