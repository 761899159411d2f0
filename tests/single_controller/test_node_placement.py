"""Which node each entry of a resource pool is pinned to (pure planning, no cluster), and errors that cross
processes."""

from __future__ import annotations

import pickle

import pytest

from verl.single_controller.ray.errors import WorkerDiedError, WorkerTimeoutError
from verl.single_controller.ray.node_placement import ClusterNode, assign_nodes, free_resources


def _nodes(*cpus: float, gpus: tuple[float, ...] | None = None) -> list[ClusterNode]:
    nodes = []
    for i, count in enumerate(cpus):
        resources = {"CPU": count}
        if gpus is not None:
            resources["GPU"] = gpus[i]
        nodes.append(ClusterNode(node_id=f"n{i}", ip="10.0.0.1", resources=resources, is_head=i == 0))
    return nodes


def test_each_entry_gets_a_node_of_its_own_and_later_pools_prefer_free_nodes():
    nodes = _nodes(2, 2, 2)
    free, taken = free_resources(nodes), set()
    trainer = assign_nodes([{"CPU": 0.25}, {"CPU": 0.25}], nodes, free, taken)
    rollout = assign_nodes([{"CPU": 0.5}], nodes, free, taken)
    assert trainer == ["n0", "n1"]
    assert rollout == ["n2"]
    assert free["n0"]["CPU"] == pytest.approx(1.75) and free["n2"]["CPU"] == pytest.approx(1.5)


def test_a_pool_shares_a_taken_node_when_no_free_one_is_left():
    nodes = _nodes(2, 2)
    free, taken = free_resources(nodes), set()
    assert assign_nodes([{"CPU": 0.5}, {"CPU": 0.5}], nodes, free, taken) == ["n0", "n1"]
    assert assign_nodes([{"CPU": 0.5}], nodes, free, taken) == ["n0"]


def test_entries_without_room_on_a_distinct_node_are_left_to_ray():
    nodes = _nodes(4, 4, gpus=(8, 0))  # a GPU node and a CPU-only head-like node
    free = free_resources(nodes)
    assert assign_nodes([{"CPU": 1, "GPU": 8}, {"CPU": 1, "GPU": 8}], nodes, free, set()) == ["n0", None]


def test_a_one_node_cluster_plans_nothing():
    nodes = _nodes(8)
    assert assign_nodes([{"CPU": 1}, {"CPU": 1}], nodes, free_resources(nodes), set()) == [None, None]


def test_worker_errors_survive_pickling_with_their_fields():
    died = WorkerDiedError(
        "actor rank 1 died", role="actor", rank=1, method="update_actor", node_id="abc", first_logged_error="OOM"
    )
    again = pickle.loads(pickle.dumps(died))
    assert (type(again), str(again), again.rank, again.node_id, again.first_logged_error) == (
        WorkerDiedError,
        "actor rank 1 died",
        1,
        "abc",
        "OOM",
    )
    late = pickle.loads(
        pickle.dumps(WorkerTimeoutError("late", role="critic", rank=0, method="m", pending_ranks=[0, 3]))
    )
    assert isinstance(late, TimeoutError) and late.pending_ranks == [0, 3] and late.role == "critic"
