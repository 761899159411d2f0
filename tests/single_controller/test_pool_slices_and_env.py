"""On the shared local Ray cluster: slices of one pool (split_resource_pool), merged pools, each rank's environment
(worker_env, RAY_LOCAL_WORLD_SIZE, master_port_range, explicit master address) and fused colocated groups."""

import os

import pytest
import ray

from verl.single_controller.base import Dispatch, Worker, register
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls_fused,
    merge_resource_pool,
    split_resource_pool,
)

pytestmark = pytest.mark.ray

ENV_KEYS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "RAY_LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TAG",
)


class EnvWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self):
        pg = ray.util.get_current_placement_group()
        return {**{key: os.environ.get(key) for key in ENV_KEYS}, "pg": pg.id.hex() if pg else None}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, x):
        return x + self.rank


@pytest.fixture(scope="module")
def pool(ray_cluster):
    pool = RayResourcePool([4], use_gpu=False, max_colocate_count=2, name_prefix="slices")
    yield pool
    pool.release()


def test_slices_of_one_pool_are_separate_groups_on_its_bundles(pool):
    first, rest = split_resource_pool(pool, [1, 3])
    assert (first.world_size, rest.world_size, rest.start_bundle_index) == (1, 3, 1)
    alone = RayWorkerGroup(first, RayClassWithInitArgs(EnvWorker), worker_env={"TAG": "alone"})
    trio = RayWorkerGroup(rest, RayClassWithInitArgs(EnvWorker), master_port_range=[29650, 29700])
    try:
        (env,) = alone.env()
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["RAY_LOCAL_WORLD_SIZE"], env["TAG"]) == (
            "0",
            "1",
            "0",
            "1",
            "alone",
        )
        envs = trio.env()
        assert [e["RANK"] for e in envs] == ["0", "1", "2"] and {e["WORLD_SIZE"] for e in envs} == {"3"}
        assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2"] and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"3"}
        assert {e["TAG"] for e in envs} == {None}
        assert len({e["MASTER_PORT"] for e in envs}) == 1 and 29650 <= int(envs[0]["MASTER_PORT"]) < 29700
        assert {e["pg"] for e in [env, *envs]} == {pool.pgs[0].id.hex()}
        with pytest.raises(ValueError, match=r"split_size=\[2, 3\] must be positive and sum to the pool's 4 slots"):
            split_resource_pool(pool, [2, 3])
    finally:
        alone.shutdown()
        trio.shutdown()


def test_worker_env_cannot_override_the_rank_variables(pool):
    with pytest.raises(ValueError, match=r"\['RANK'\]"):
        RayWorkerGroup(pool, RayClassWithInitArgs(EnvWorker), worker_env={"RANK": "7"})


def test_merged_pools_and_an_explicit_master_address(ray_cluster):
    a = RayResourcePool([1], use_gpu=False, name_prefix="a")
    b = RayResourcePool([1], use_gpu=False, name_prefix="b")
    merged = merge_resource_pool(a, b)
    group = RayWorkerGroup(merged, RayClassWithInitArgs(EnvWorker), master_addr="127.0.0.1", master_port=29555)
    try:
        envs = group.env()
        assert [e["RANK"] for e in envs] == ["0", "1"] and [e["LOCAL_RANK"] for e in envs] == ["0", "0"]
        assert [e["pg"] for e in envs] == [a.pgs[0].id.hex(), b.pgs[0].id.hex()]
        assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("127.0.0.1", "29555")}
        assert (group.master_address, group.master_port) == ("127.0.0.1", "29555")
    finally:
        group.shutdown()
        a.release()
        b.release()


@pytest.mark.slow  # CI budget; pool slices stay in the default tier
def test_fuse_exposes_each_role_as_a_group_attribute(pool):
    fused = create_colocated_worker_cls_fused(
        {"left": RayClassWithInitArgs(EnvWorker), "right": RayClassWithInitArgs(EnvWorker)}
    )
    group = RayWorkerGroup(pool, fused)
    try:
        group.fuse(["left", "right"])
        assert group.left.add(10) == [10, 11, 12, 13]
        assert group.right.sub_cls_name == "right" and group.right.add(0) == [0, 1, 2, 3]
        assert group.left_add(1) == [1, 2, 3, 4]  # the fused class's own (prefixed) methods stay bound
    finally:
        group.shutdown()
