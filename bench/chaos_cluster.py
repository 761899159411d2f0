"""The chaos soak's cluster: a head and worker nodes, each a raylet of its own on this machine, and how to kill one.

A node dies the way a machine does: its raylet gets SIGKILL (its worker processes then exit), and the cluster's
health checks, shortened here to seconds, mark it dead. A replacement node joins afterwards, as an autoscaler
would bring one, so later faults still have two nodes to hit.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["HEALTH_CHECKS", "SoakCluster"]

# A killed raylet refuses connections at once, so each check fails fast: about period x threshold to declare it
# dead. The timeout stays long so that a busy 2-core machine does not lose a healthy node.
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 5000,
    "health_check_failure_threshold": 5,
}
NODE_CPUS = 4
REPO = Path(__file__).resolve().parents[1]


@dataclass
class SoakCluster:
    """Ray's test cluster (``ray.cluster_utils.Cluster``) with ``workers`` worker nodes, joined by this process."""

    workers: int = 1
    cluster: Any = None
    nodes: list[Any] = field(default_factory=list)
    temp_dirs: list[str] = field(default_factory=list)

    def start(self, runtime_env: dict | None = None) -> SoakCluster:
        import ray
        from ray.cluster_utils import Cluster

        if ray.is_initialized():
            ray.shutdown()
        head = {"num_cpus": NODE_CPUS, "include_dashboard": False, "_system_config": HEALTH_CHECKS}
        self.cluster = _retried(lambda: Cluster(initialize_head=True, head_node_args=head), "the head node")
        for _ in range(self.workers):
            self.add_node()
        # verl's INFO lines (a weight sync's start among them) into each worker's log, where the soak reads them;
        # the hook runs before Ray puts the driver's folder on the worker's path, so the repository goes in PYTHONPATH
        env = {"worker_process_setup_hook": "verl.utils.logging_utils.configure_verl_logging", **(runtime_env or {})}
        env_vars = dict(env.get("env_vars") or {})
        env_vars.setdefault("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        env["env_vars"] = env_vars
        ray.init(address=self.cluster.address, runtime_env=env, log_to_driver=False)
        return self

    @property
    def head_id(self) -> str:
        return self.cluster.head_node.node_id

    def add_node(self) -> Any:
        """A worker node with its own temp folder (a separate machine's disk); waits until it has joined."""
        temp_dir = tempfile.mkdtemp(prefix="chaos_node_")
        self.temp_dirs.append(temp_dir)
        node = _retried(lambda: self.cluster.add_node(num_cpus=NODE_CPUS, temp_dir=temp_dir), "a worker node")
        self.nodes.append(node)
        self.cluster.wait_for_nodes()
        return node

    def raylet_pid(self, node: Any) -> int:
        from ray._private import ray_constants

        return int(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)

    def kill_raylet(self, node_id: str) -> int:
        """SIGKILL the raylet of worker node ``node_id``; returns its pid. The node's other processes are reaped
        by :meth:`reap`, once the cluster has marked the node dead."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        pid = self.raylet_pid(node)
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_until_dead(self, node_id: str, timeout_s: float = 90.0) -> float:
        import ray

        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
                return time.monotonic() - start
            time.sleep(0.2)
        raise TimeoutError(f"node {node_id} still alive {timeout_s:g}s after its raylet was killed")

    def reap(self, node_id: str) -> None:
        """Stop what is left of a dead node (its object store, log monitor) and forget it."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        self.nodes.remove(node)
        try:
            self.cluster.remove_node(node, allow_graceful=False)
        except Exception:  # noqa: BLE001 - the raylet is already gone; the rest is cleanup
            pass

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
        while self.temp_dirs:
            shutil.rmtree(self.temp_dirs.pop(), ignore_errors=True)


def _retried(start: Any, what: str, attempts: int = 3) -> Any:
    """``start()``, again when Ray gives up on a raylet that registered too slowly (a fixed 30 s in Ray, which a
    machine busy with other work can exceed)."""
    import psutil

    me = psutil.Process()
    for attempt in range(1, attempts + 1):
        before = {child.pid for child in me.children(recursive=True)}
        try:
            return start()
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for it
            if "timed out during startup" not in str(err) or attempt == attempts:
                raise
            print(f"chaos soak: {what} did not register in time (attempt {attempt}); starting it again", flush=True)
            for child in me.children(recursive=True):  # what the failed attempt started (its GCS, its raylet)
                if child.pid not in before:
                    child.kill()
    raise AssertionError("unreachable")
