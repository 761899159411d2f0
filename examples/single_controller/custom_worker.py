"""A recipe author's worker group in ~80 lines: a worker, a custom dispatch mode, colocated roles.

Runs on a laptop CPU (starts its own local Ray cluster):

    python examples/single_controller/custom_worker.py
"""

from __future__ import annotations

import os

import ray
import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, PerRank, Worker, register, register_dispatch_mode
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    ResourcePoolManager,
    create_colocated_worker_cls,
)
from verl.trainer.ppo.roles import Role


# A custom dispatch mode: rank i gets the i-th item of a dict's sorted keys; results come back as a dict.
def dispatch_by_key(worker_group, table):
    keys = sorted(table)
    if len(keys) != worker_group.world_size:
        raise ValueError(f"BY_KEY needs {worker_group.world_size} keys, got {keys}")
    return (PerRank([(k, table[k]) for k in keys]),), {}


def collect_by_key(worker_group, outputs):
    return dict(outputs)


BY_KEY = register_dispatch_mode("BY_KEY", dispatch_by_key, collect_by_key)


class ScorerWorker(Worker):
    """Scores rows; every rank holds its own copy of the (tiny) model."""

    def __init__(self, weight: float):
        super().__init__()  # reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
        self.weight = weight

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def where(self):
        return f"rank {self.rank}/{self.world_size} pid {os.getpid()} master {self.get_master_addr_port()}"

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def score(self, data: DataProto) -> DataProto:
        scores = data.batch["x"].float() * self.weight
        return DataProto.from_dict({"scores": scores, "rank": torch.full_like(scores, self.rank)})

    @register(dispatch_mode=BY_KEY)
    def normalise(self, item):
        key, value = item
        return key, value / self.weight


class StatsWorker(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def mean(self, data: DataProto):
        return float(data.batch["x"].float().mean())


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False)
    # Two ranks on one "node", CPU-only: each rank takes a 0.25-core slot.
    manager = ResourcePoolManager({"global_pool": [2]}, {Role.Actor: "global_pool"}, device="cpu")
    manager.create_resource_pool()
    pool = manager.get_resource_pool(Role.Actor)

    scorer = RayWorkerGroup(pool, RayClassWithInitArgs(ScorerWorker, weight=2.0))
    print(scorer.where())
    batch = DataProto.from_dict({"x": torch.arange(5)})  # 5 rows on 2 ranks: padded to 6, unpadded after
    print(scorer.score(batch).batch["scores"].tolist())
    print(scorer.normalise({"a": 4.0, "b": 8.0}))

    # Both roles in one process per rank; spawn gives one handle per role.
    both = RayWorkerGroup(
        pool,
        create_colocated_worker_cls(
            {
                "scorer": RayClassWithInitArgs(ScorerWorker, weight=3.0),
                "stats": RayClassWithInitArgs(StatsWorker),
            }
        ),
    )
    roles = both.spawn(prefix_set=["scorer", "stats"])
    print(roles["scorer"].where(), roles["stats"].mean(batch))
    ray.shutdown()


if __name__ == "__main__":
    main()
