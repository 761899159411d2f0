"""Which node each placement group of a resource pool lands on.

A pool's process list (``[n_gpus_per_node] * nnodes``) means one entry per node. On a GPU cluster Ray keeps the
entries apart by itself (a node's GPUs run out), but slots that reserve a fraction of a core, or nodes with more
GPUs than one entry asks for, let Ray pack several entries onto one node: ``trainer.nnodes=2`` would then train on
one machine. So every entry is pinned (Ray's ``ray.io/node-id`` label) to a node of its own, and pools created
later prefer nodes no earlier pool took, which puts a standalone rollout pool on its own nodes. When the cluster has
too few nodes with room, the entries left over are placed by Ray as before, so one-machine runs do not change.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group

__all__ = [
    "NODE_ID_LABEL",
    "ClusterNode",
    "actor_record",
    "alive_nodes",
    "assign_nodes",
    "describe_node",
    "free_resources",
    "label_selectors_supported",
    "node_of_actor",
    "on_this_node",
]

NODE_ID_LABEL = "ray.io/node-id"


@dataclass(frozen=True)
class ClusterNode:
    """One alive Ray node: its id, IP and total resources."""

    node_id: str
    ip: str
    resources: dict[str, float]
    is_head: bool

    def describe(self) -> str:
        return f"node {self.node_id[:12]} ({self.ip})"


def alive_nodes() -> list[ClusterNode]:
    """The cluster's alive nodes, the head node first, the others by IP then id (a stable order across runs)."""
    nodes = []
    for info in ray.nodes():
        if not info.get("Alive"):
            continue
        resources = {key: float(value) for key, value in (info.get("Resources") or {}).items()}
        is_head = any(key == "node:__internal_head__" for key in resources)
        nodes.append(
            ClusterNode(
                node_id=info["NodeID"], ip=info.get("NodeManagerAddress", ""), resources=resources, is_head=is_head
            )
        )
    return sorted(nodes, key=lambda node: (not node.is_head, node.ip, node.node_id))


def _fits(free: dict[str, float], need: dict[str, float]) -> bool:
    return all(free.get(key, 0.0) + 1e-9 >= amount for key, amount in need.items())


def assign_nodes(
    requests: list[dict[str, float]], nodes: list[ClusterNode], free: dict[str, dict[str, float]], taken: set[str]
) -> list[str | None]:
    """A distinct node id for each placement group of one pool (``requests``: the resources each one reserves).

    ``free`` (node id -> resources not yet promised) is updated in place and ``taken`` (nodes earlier pools use)
    grows, so several pools can be planned one after the other. A node no earlier pool took is preferred; an entry
    no distinct node has room for gets None (Ray places it). A one-node cluster plans nothing.
    """
    if len(nodes) < 2:
        return [None] * len(requests)
    chosen: list[str | None] = []
    used_by_pool: set[str] = set()
    for need in requests:
        candidates = [
            node.node_id for node in nodes if node.node_id not in used_by_pool and _fits(free[node.node_id], need)
        ]
        fresh = [node_id for node_id in candidates if node_id not in taken]
        pick = fresh[0] if fresh else candidates[0] if candidates else None
        chosen.append(pick)
        if pick is not None:
            used_by_pool.add(pick)
            for key, amount in need.items():
                free[pick][key] = free[pick].get(key, 0.0) - amount
    taken.update(used_by_pool)
    return chosen


def free_resources(nodes: list[ClusterNode]) -> dict[str, dict[str, float]]:
    """Each node's total resources, the starting point of :func:`assign_nodes`."""
    return {node.node_id: dict(node.resources) for node in nodes}


def label_selectors_supported() -> bool:
    """Whether this Ray can pin a placement group's bundles to a node by label (Ray >= 2.49)."""
    return "bundle_label_selector" in inspect.signature(placement_group).parameters


def actor_record(actor_id: str) -> dict:
    """What the cluster's control store knows of an actor (node, pid, state, death cause); {} when it cannot say.

    Read from the GCS rather than the state API, which needs the dashboard (clusters often run without it)."""
    try:
        from ray._private import state

        return dict(state.actors(actor_id) or {})
    except Exception:  # noqa: BLE001 - naming the node is best effort; the error naming role and rank stands
        return {}


def node_of_actor(actor_id: str) -> str | None:
    """The id of the node an actor runs (or ran) on; None when Ray cannot say."""
    node_id = (actor_record(actor_id).get("Address") or {}).get("NodeID")
    return str(node_id) if node_id else None


def describe_node(node_id: str) -> str:
    """``node <id> (<ip>, alive|dead)`` from the cluster's node table."""
    for info in ray.nodes():
        if info.get("NodeID") == node_id:
            state = "alive" if info.get("Alive") else "dead"
            return f"node {node_id} ({info.get('NodeManagerAddress', '?')}, {state})"
    return f"node {node_id} (not in the cluster's node table)"


def on_this_node(num_cpus: float = 0.0) -> dict[str, object]:
    """Actor options that keep a new actor on the caller's node: the task runner on the driver's (the head, under
    ``ray job submit``), and the controller-side actors the task runner starts (agent-loop workers, rollouter,
    queue) on the task runner's. The single controller then dies only with the driver, never with a worker node,
    and a dead worker node takes only worker ranks and replicas, which the errors name.

    The affinity is hard (Ray ignores a soft one for actors that reserve no CPU); an actor reserving ``num_cpus``
    on a node that has fewer in total (a head started with ``--num-cpus=0``) is left to Ray instead of waiting
    forever."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node_id = ray.get_runtime_context().get_node_id()
    if num_cpus > 0:
        total = next(
            (
                float((node.get("Resources") or {}).get("CPU", 0.0))
                for node in ray.nodes()
                if node.get("NodeID") == node_id
            ),
            0.0,
        )
        if total < num_cpus:
            return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}
