"""Per-process setup of a Ray worker group member, and the driver-side readers of what it publishes.

Two things travel through Ray's GCS key-value store because the driver cannot ask a process directly:
the rank-0 rendezvous address (rank 0 may block in ``init_process_group`` inside its constructor), and the first
error a process logged (a dead process answers nothing).
"""

from __future__ import annotations

import os
import socket

from verl.single_controller.base.failure_log import install_process_hooks, set_failure_sink

KV_NAMESPACE = "verl_single_controller"
RENDEZVOUS_ENV = "VERL_WG_RENDEZVOUS_KEY"
# "low-high": rank 0 binds MASTER_PORT to the first free port in [low, high) (RayWorkerGroup master_port_range).
PORT_RANGE_ENV = "VERL_WG_MASTER_PORT_RANGE"

_setup_done = {"value": False}


def failure_key(actor_id_hex: str) -> bytes:
    return f"first_error/{actor_id_hex}".encode()


def _kv():
    from ray.experimental import internal_kv

    return internal_kv


def read_first_error(actor_id_hex: str) -> str | None:
    """The first error the actor's process recorded, or None."""
    try:
        value = _kv()._internal_kv_get(failure_key(actor_id_hex), namespace=KV_NAMESPACE)
    except Exception:
        return None
    return value.decode(errors="replace") if value else None


def clear_first_error(actor_id_hex: str) -> None:
    try:
        _kv()._internal_kv_del(failure_key(actor_id_hex), namespace=KV_NAMESPACE)
    except Exception:
        pass


def read_rendezvous(key: str) -> tuple[str, str] | None:
    value = _kv()._internal_kv_get(key.encode(), namespace=KV_NAMESPACE)
    if not value:
        return None
    addr, port = value.decode().rsplit(":", 1)
    return addr, port


def clear_rendezvous(key: str) -> None:
    try:
        _kv()._internal_kv_del(key.encode(), namespace=KV_NAMESPACE)
    except Exception:
        pass


def _free_port(port_range: str | None = None) -> int:
    """A port free right now: any (the OS picks), or the first free one of ``"low-high"`` (high excluded)."""
    if not port_range:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]
    low, high = (int(p) for p in port_range.split("-"))
    for port in range(low, high):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in master_port_range [{low}, {high}) on this node")


def setup_worker_process() -> None:
    """Install the first-error recorder and, on rank 0, publish MASTER_ADDR/MASTER_PORT (once per process)."""
    if _setup_done["value"]:
        return
    _setup_done["value"] = True
    import ray

    actor_id = ray.get_runtime_context().get_actor_id()
    if actor_id:
        key = failure_key(actor_id)

        def sink(text: str) -> None:
            _kv()._internal_kv_put(key, text.encode(), overwrite=False, namespace=KV_NAMESPACE)

        set_failure_sink(sink)
        install_process_hooks()

    rendezvous_key = os.environ.get(RENDEZVOUS_ENV)
    # Rank 0 always picks its own address: MASTER_ADDR/MASTER_PORT inherited from the driver's environment (a driver
    # started under torchrun, or one that opened a process group before ray.init) would give every group one port.
    if rendezvous_key and os.environ.get("RANK", "0") == "0":
        os.environ["MASTER_ADDR"] = ray.util.get_node_ip_address()
        os.environ["MASTER_PORT"] = str(_free_port(os.environ.get(PORT_RANGE_ENV)))
        value = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}".encode()
        _kv()._internal_kv_put(rendezvous_key.encode(), value, overwrite=True, namespace=KV_NAMESPACE)
