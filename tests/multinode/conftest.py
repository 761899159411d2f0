"""A real multi-node Ray cluster on this one machine, one per test module.

Each node is a raylet of its own (Ray's ``cluster_utils.Cluster``), with its own node id, CPUs and worker
processes: to the code under test it is what a cluster of machines looks like, except that every node has the same
IP. Removing a node stops its raylet and kills its processes, which is how a machine dies.

The module's cluster replaces the session's one-node cluster while the module runs; the one-node cluster is started
again afterwards for the modules that follow.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_NODE_TEMP_DIRS: list[str] = []  # removed with the cluster

# Logical CPUs of every node: slots reserve a quarter core (VERL_CPUS_PER_PROCESS), so a node hosts eight processes.
NODE_CPUS = 2


@dataclass
class LocalCluster:
    """The cluster of a test module: ``cluster`` is Ray's test cluster; ``nodes`` its worker nodes in creation order."""

    cluster: Any
    head: Any
    nodes: list[Any] = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.cluster.address

    def node_ids(self) -> list[str]:
        """Ids of the nodes that are alive, head first."""
        import ray

        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        ordered = [self.head.node_id] + [node.node_id for node in self.nodes]
        return [node_id for node_id in ordered if node_id in alive]

    def add_node(self, num_cpus: int = NODE_CPUS, **kwargs: Any) -> Any:
        node = _add_node(self.cluster, num_cpus, **kwargs)
        self.nodes.append(node)
        self.cluster.wait_for_nodes()
        return node

    def kill_node(self, node: Any) -> None:
        """Stop ``node``'s raylet and every process on it, as when its machine goes away."""
        self.cluster.remove_node(node, allow_graceful=False)
        self.nodes.remove(node)

    def wait_until_dead(self, node_id: str, timeout_s: float = 60.0) -> float:
        """Seconds until the cluster marks ``node_id`` dead."""
        import ray

        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if not any(node["NodeID"] == node_id and node["Alive"] for node in ray.nodes()):
                return time.monotonic() - start
            time.sleep(0.2)
        raise TimeoutError(f"node {node_id} still alive after {timeout_s:g}s")


def start_local_cluster(worker_nodes: int, head_cpus: int = NODE_CPUS, **head_args: Any) -> LocalCluster:
    """A head node plus ``worker_nodes`` nodes, joined by this process as a driver."""
    import ray
    from _ray_session import test_runtime_env
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    previous = read_ray_address()
    # dashboard and dashboard-agent ports of its own: another test process may run a cluster of its own at the same
    # time, and a head whose agent cannot bind the default port cannot run submitted jobs ("No available agent")
    head_args = {
        "num_cpus": head_cpus,
        "dashboard_port": free_port(),
        "dashboard_agent_listen_port": free_port(),
        **head_args,
    }
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    local = LocalCluster(cluster=cluster, head=cluster.head_node)
    for _ in range(worker_nodes):
        local.nodes.append(_add_node(cluster, NODE_CPUS))
    cluster.wait_for_nodes()
    # Starting a head makes it this machine's default cluster, which a plain ray.init() in any other process joins;
    # tests of other processes (a recipe run as a subprocess) must keep starting their own.
    restore_ray_address(previous)
    ray.init(address=cluster.address, runtime_env=test_runtime_env(), log_to_driver=True)
    return local


def _add_node(cluster: Any, num_cpus: int, **kwargs: Any) -> Any:
    """A worker node with a temp folder of its own, as a separate machine has its own disk: nodes sharing one folder
    would unpack a job's working_dir into the same place and race (one deletes files another is importing)."""
    if "temp_dir" not in kwargs:
        kwargs["temp_dir"] = tempfile.mkdtemp(prefix="ray_node_")
        _NODE_TEMP_DIRS.append(kwargs["temp_dir"])
    return cluster.add_node(num_cpus=num_cpus, **kwargs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_ray_address() -> str | None:
    from ray._private.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    return path.read_text() if path.is_file() else None


def restore_ray_address(previous: str | None) -> None:
    from ray._private.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    if previous is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(previous)


def stop_local_cluster(local: LocalCluster, restore_session: bool) -> None:
    import ray
    from _ray_session import start_session_ray

    ray.shutdown()
    local.cluster.shutdown()
    while _NODE_TEMP_DIRS:
        shutil.rmtree(_NODE_TEMP_DIRS.pop(), ignore_errors=True)
    if restore_session:
        start_session_ray()


@pytest.fixture(scope="module")
def multinode_cluster(request):
    """A module's cluster: a head plus ``MULTINODE_WORKER_NODES`` (module global, default 2) worker nodes."""
    import ray

    worker_nodes = int(getattr(request.module, "MULTINODE_WORKER_NODES", 2))
    had_session_cluster = ray.is_initialized()
    os.environ.setdefault("RAY_worker_niceness", "0")
    local = start_local_cluster(worker_nodes)
    try:
        yield local
    finally:
        stop_local_cluster(local, restore_session=had_session_cluster)
