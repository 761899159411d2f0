"""ResourcePool: how many worker processes run on each node; backend-independent bookkeeping."""

from __future__ import annotations


class ResourcePool:
    """``process_on_nodes[i]`` processes on node i; ``max_colocate_count`` groups may share each process slot."""

    def __init__(
        self, process_on_nodes: list[int] | None = None, max_colocate_count: int = 10, n_gpus_per_node: int = 8
    ) -> None:
        process_on_nodes = list(process_on_nodes) if process_on_nodes is not None else []
        for i, n in enumerate(process_on_nodes):
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"process_on_nodes[{i}] must be a positive int, got {n!r}")
        if not isinstance(max_colocate_count, int) or max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be a positive int, got {max_colocate_count!r}")
        self._store = process_on_nodes
        self.max_colocate_count = max_colocate_count
        self.n_gpus_per_node = n_gpus_per_node

    def add_node(self, process_count: int) -> None:
        if not isinstance(process_count, int) or process_count < 1:
            raise ValueError(f"process_count must be a positive int, got {process_count!r}")
        self._store.append(process_count)

    @property
    def world_size(self) -> int:
        return sum(self._store)

    @property
    def store(self) -> list[int]:
        return self._store

    def __call__(self) -> list[int]:
        return self._store

    def local_world_size_list(self) -> list[int]:
        """For each global rank, the number of processes on its node."""
        return [n for n in self._store for _ in range(n)]

    def local_rank_list(self) -> list[int]:
        """For each global rank, its index among the processes of its node."""
        return [i for n in self._store for i in range(n)]
