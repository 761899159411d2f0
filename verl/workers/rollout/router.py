"""``GlobalRequestLoadBalancer``: which rollout server takes each request, shared by every client of a server pool.

- Sticky: later turns of a ``request_id`` go back to the server that served its first turn (its prefix cache is
  warm there); the id -> server map is a bounded LRU.
- Least loaded: a new request goes to the server with the fewest requests in flight (ties: the one that has been
  given fewer requests so far, then registration order).
- ``full_determinism``: a new request goes to ``crc32(request_id) mod len(servers)`` instead, so routing does not
  depend on arrival timing and repeats across runs.
- Servers may be added and removed while running; a sticky entry pointing at a removed server is dropped.

A plain class: wrap it with ``ray.remote`` to share one instance between processes. Callers acquire a server per
request and release it when the request finishes. :class:`~verl.experimental.agent_loop.AsyncLLMServerManager`
applies the same policy within one process.
"""

from __future__ import annotations

import collections
import logging
import zlib
from typing import Any

__all__ = ["DEFAULT_ROUTING_CACHE_SIZE", "GlobalRequestLoadBalancer"]

logger = logging.getLogger(__name__)

DEFAULT_ROUTING_CACHE_SIZE = 10000


class GlobalRequestLoadBalancer:
    """Sticky, least-in-flight routing over ``servers`` (server id -> handle)."""

    def __init__(
        self, servers: dict[str, Any], max_cache_size: int = DEFAULT_ROUTING_CACHE_SIZE, full_determinism: bool = False
    ) -> None:
        if max_cache_size < 1:
            raise ValueError(f"GlobalRequestLoadBalancer: max_cache_size must be >= 1, got {max_cache_size}")
        self._servers: dict[str, Any] = dict(servers)
        self._inflight: dict[str, int] = {sid: 0 for sid in self._servers}
        self._given: dict[str, int] = {sid: 0 for sid in self._servers}
        self._sticky: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._max_cache_size = int(max_cache_size)
        self._full_determinism = bool(full_determinism)

    def _pick(self, request_id: str) -> str:
        order = list(self._servers)
        if self._full_determinism:
            return order[zlib.crc32(str(request_id).encode()) % len(order)]
        return min(order, key=lambda sid: (self._inflight[sid], self._given[sid], order.index(sid)))

    def acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        """``(server_id, handle)`` for the request, counted in flight until :meth:`release_server`."""
        server_id = self._sticky.get(request_id)
        if server_id is not None and server_id in self._servers:
            self._sticky.move_to_end(request_id)
        else:
            if not self._servers:
                raise RuntimeError(f"request {request_id}: the load balancer has no servers")
            server_id = self._pick(request_id)
            self._sticky[request_id] = server_id
            while len(self._sticky) > self._max_cache_size:
                self._sticky.popitem(last=False)
        self._inflight[server_id] += 1
        self._given[server_id] += 1
        return server_id, self._servers[server_id]

    def release_server(self, server_id: str, request_id: str | None = None) -> None:
        """The request on ``server_id`` finished (unknown or removed servers are ignored)."""
        if self._inflight.get(server_id, 0) > 0:
            self._inflight[server_id] -= 1

    def require_acquire_fields(self) -> list[str]:
        """Request fields :meth:`acquire_server` needs beyond ``request_id``: none."""
        return []

    def require_release_fields(self) -> list[str]:
        """Request fields :meth:`release_server` needs beyond the server id: none."""
        return []

    def add_servers(self, servers: dict[str, Any]) -> None:
        """Register more servers (an id already present gets the new handle and keeps its counts)."""
        for sid, handle in servers.items():
            self._servers[sid] = handle
            self._inflight.setdefault(sid, 0)
            self._given.setdefault(sid, 0)
        logger.info("load balancer: added %d servers, %d in the pool", len(servers), len(self._servers))

    def remove_servers(self, server_ids: list[str]) -> None:
        """Drop servers from the pool; their sticky entries are dropped too."""
        gone = set(server_ids)
        for sid in gone:
            self._servers.pop(sid, None)
            self._inflight.pop(sid, None)
            self._given.pop(sid, None)
        for rid in [rid for rid, sid in self._sticky.items() if sid in gone]:
            del self._sticky[rid]
        logger.info("load balancer: removed %d servers, %d in the pool", len(gone), len(self._servers))

    def get_inflight_count(self, server_id: str) -> int:
        return self._inflight.get(server_id, 0)

    def get_all_servers(self) -> list[str]:
        return list(self._servers)

    def get_total_inflight(self) -> int:
        return sum(self._inflight.values())

    def clear_sticky_cache(self) -> dict[str, Any]:
        """Forget every sticky entry (new turns are balanced afresh, e.g. onto newly added servers)."""
        cleared = len(self._sticky)
        self._sticky.clear()
        return {"cleared_entries": cleared, "server_loads": dict(self._inflight)}

    def get_status(self) -> dict[str, Any]:
        return {
            "servers": dict(self._inflight),
            "total_inflight": self.get_total_inflight(),
            "active_servers": len(self._servers),
            "registered_handles": list(self._servers),
        }
