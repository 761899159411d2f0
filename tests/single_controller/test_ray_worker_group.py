"""Worker groups on the shared local Ray cluster: every dispatch mode, padding, futures, colocation, two pools,
async methods, gloo collectives and failure surfacing.

Groups are module-scoped and reused: on 2 cores every extra process costs seconds.
"""

import logging
import os
import re
import signal
import time

import pytest
import ray
import torch

from verl.protocol import DataProto, DataProtoFuture
from verl.single_controller.base import Dispatch, Execute, Worker, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.base.decorator import register_dispatch_mode
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolManager,
    WorkerDiedError,
    WorkerError,
    WorkerTimeoutError,
    create_colocated_worker_cls,
)
from verl.trainer.ppo.roles import Role

pytestmark = pytest.mark.ray

# A broken test fails after this long instead of waiting the 30 min production default.
CALL_TIMEOUT_S = 60.0


def _dispatch_to_first_two(worker_group, value):
    # rank 0 and 1 get value and value + 1; other ranks get None
    per_rank = [value, value + 1] + [None] * (worker_group.world_size - 2)
    return (per_rank,), {}


def _collect_non_none(worker_group, outputs):
    return [o for o in outputs if o is not None]


FIRST_TWO = register_dispatch_mode("FIRST_TWO_TEST", _dispatch_to_first_two, _collect_non_none)
TP_MESH = make_nd_compute_dataproto_dispatch_fn("tp")


def rows(n):
    return DataProto.from_dict({"x": torch.arange(n)}, meta_info={"tag": "t"})


class DemoWorker(Worker):
    """Three ranks; ranks 0 and 1 form a tensor-parallel pair on mesh 'tp' (dp rank 0), rank 2 is dp rank 1."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.seen = None
        self._register_dispatch_collect_info("tp", dp_rank=0 if self.rank < 2 else 1, is_collect=self.rank != 1)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self):
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
        return {k: os.environ.get(k) for k in keys} | {"rank": self.rank, "pid": os.getpid()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def scaled(self, x, offset=0):
        return x * self.scale + offset + self.rank

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def pair(self, a, b):
        return (a, b, self.rank)

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def square(self, v):
        return v * v

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def mark(self, data):
        data.batch["rank"] = torch.full((len(data),), self.rank)
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def mark_later(self, data):
        time.sleep(0.5)
        data.batch["doubled"] = data.batch["x"] * 2
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def fail_later(self, data):
        if self.rank == 1:
            raise RuntimeError("upstream broke on rank 1")
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def metric(self, data):
        return {"rank": self.rank, "rows": len(data), "sum": int(data.batch["x"].sum())}

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def rank_zero_only(self, v):
        return (v, self.rank)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def one_to_all_on_zero(self, v):
        return (v, self.rank)

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    def direct(self, v):
        return ("direct", v, self.rank)

    @register(dispatch_mode=FIRST_TWO)
    def custom(self, v):
        return None if v is None else (v, self.rank)

    @register(dispatch_mode=TP_MESH)
    def mesh_mark(self, data):
        self.seen = data.batch["x"].tolist()
        data.batch["rank"] = torch.full((len(data),), self.rank)
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def last_seen(self):
        return self.seen

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def async_scaled(self, x):
        import asyncio

        await asyncio.sleep(0.01)
        return x * self.scale + self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, bad_rank):
        if self.rank == bad_rank:
            self._explode()
        return self.rank

    def _explode(self):
        raise ValueError(f"bad input on rank {self.rank}")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hang_on(self, slow_rank, seconds):
        if self.rank == slow_rank:
            time.sleep(seconds)
        return self.rank


class ActorRole(Worker):
    """Holds the torch.distributed (gloo) process group of the colocated ranks, as a training actor would."""

    def __init__(self, lr):
        super().__init__()
        self.lr = lr

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_process_group(self):
        import datetime

        import torch.distributed as dist

        dist.init_process_group(
            "gloo", rank=self.rank, world_size=self.world_size, timeout=datetime.timedelta(seconds=60)
        )
        return dist.get_world_size()

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def all_reduce(self, value):
        import torch.distributed as dist

        t = torch.tensor([float(value)])
        dist.all_reduce(t)
        return t.item()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self):
        return ("actor", self.rank, os.getpid(), self.lr)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update(self, data):
        data.batch["x"] = data.batch["x"] + 100
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def ping(self):
        return "actor-pong"


class CriticRole(Worker):
    def __init__(self, value_scale):
        super().__init__()
        self.value_scale = value_scale

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self):
        return ("critic", self.rank, os.getpid(), self.value_scale)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def values(self, data):
        data.batch["values"] = data.batch["x"].float() * self.value_scale
        return data


class DyingWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def die_on(self, rank, survivor_sleep_s):
        if self.rank == rank:
            logging.getLogger("dying_worker").error("fatal: optimizer state is corrupted on rank %d", self.rank)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(survivor_sleep_s)  # the survivor is "blocked in a collective" with the dead rank
        return self.rank


class SlowStartWorker(Worker):
    """A constructor that takes ``seconds`` on the ranks in ``slow_ranks`` (or raises there, with ``fail``)."""

    def __init__(self, seconds, slow_ranks, fail=False):
        super().__init__()
        if self.rank in slow_ranks:
            if fail:
                raise ValueError(f"cannot start rank {self.rank}")
            time.sleep(seconds)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return self.rank


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def pools(ray_cluster):
    manager = ResourcePoolManager(
        {"main": [3], "side": [2]}, {Role.ActorRollout: "main", Role.Critic: "side"}, device="cpu"
    )
    manager.create_resource_pool()
    yield manager
    for pool in manager.resource_pool_dict.values():
        pool.release()


@pytest.fixture(scope="module")
def demo(pools):
    wg = RayWorkerGroup(
        pools.get_resource_pool(Role.ActorRollout),
        RayClassWithInitArgs(DemoWorker, scale=10),
        call_timeout_s=CALL_TIMEOUT_S,
    )
    yield wg
    wg.shutdown()


@pytest.fixture(scope="module")
def colocated(pools):
    cls = create_colocated_worker_cls(
        {
            "actor": RayClassWithInitArgs(ActorRole, lr=0.5),
            "critic": RayClassWithInitArgs(CriticRole, value_scale=2.0),
            "victim": RayClassWithInitArgs(DyingWorker),
        }
    )
    wg = RayWorkerGroup(pools.get_resource_pool(Role.Critic), cls, call_timeout_s=CALL_TIMEOUT_S)
    yield wg
    wg.shutdown()


# ------------------------------------------------------------------------------------------------ tests


def test_ranks_get_distributed_env_and_a_shared_master(demo):
    envs = demo.env()
    assert [e["RANK"] for e in envs] == ["0", "1", "2"] and {e["WORLD_SIZE"] for e in envs} == {"3"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1
    assert envs[0]["MASTER_PORT"] == demo.master_port
    assert len({e["pid"] for e in envs}) == 3


def test_one_to_all_all_to_all_and_dp_compute(demo):
    assert demo.scaled(2, offset=1) == [21, 22, 23]
    assert demo.pair([1, 2, 3], ["a", "b", "c"]) == [(1, "a", 0), (2, "b", 1), (3, "c", 2)]
    assert demo.pair(7, 8) == [(7, 8, 0), (7, 8, 1), (7, 8, 2)]  # non-list arguments are broadcast
    assert demo.square([1, 2, 3]) == [1, 4, 9]
    with pytest.raises(ValueError, match="one entry per rank \\(3\\)"):
        demo.square([1, 2])


def test_dp_compute_proto_pads_and_unpads_uneven_batches(demo):
    out = demo.mark(rows(7))
    assert len(out) == 7
    assert out.batch["x"].tolist() == list(range(7))
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert out.meta_info["tag"] == "t"


def test_metric_mode_returns_one_result_per_rank(demo):
    metrics = demo.metric(rows(6))
    assert [m["rank"] for m in metrics] == [0, 1, 2] and [m["rows"] for m in metrics] == [2, 2, 2]
    assert sum(m["sum"] for m in metrics) == sum(range(6))


def test_with_func_rank_zero_direct_and_custom_modes(demo):
    def tag_rank(worker, data):
        data.batch["r"] = torch.full((len(data),), worker.rank * worker.scale)
        return data

    assert demo.execute_with_func_generator(tag_rank, rows(3)).batch["r"].tolist() == [0, 10, 20]
    assert demo.rank_zero_only("v") == ("v", 0)
    assert demo.one_to_all_on_zero("w") == ("w", 0)
    assert demo.execute_func_rank_zero(max, 3, 9) == 9
    assert ray.get(demo.workers[2].direct.remote(5)) == ("direct", 5, 2)
    with pytest.raises(RuntimeError, match="DIRECT_ROLLOUT_METHOD"):
        demo.direct(5)
    assert demo.custom(40) == [(40, 0), (41, 1)]


def test_mesh_dispatch_gives_tp_replicas_the_same_shard(demo):
    out = demo.mesh_mark(rows(5))  # dp size 2: padded to 6, shards of 3
    assert out.batch["x"].tolist() == [0, 1, 2, 3, 4]
    assert out.batch["rank"].tolist() == [0, 0, 0, 2, 2]  # rank 1's duplicate answer is dropped
    assert demo.last_seen() == [[0, 1, 2], [0, 1, 2], [3, 4, 0]]


def test_nonblocking_call_returns_a_future(demo):
    future = demo.mark_later(rows(5))
    assert isinstance(future, DataProtoFuture)
    ready, _ = ray.wait(list(future.futures), num_returns=len(future.futures), timeout=0)
    assert ready == []  # returned before the workers (sleeping 0.5 s) finished
    out = future.get()
    assert out.batch["doubled"].tolist() == [0, 2, 4, 6, 8]  # padding stripped
    chained = demo.mark(demo.mark_later(rows(6)))  # workers resolve the future themselves
    assert chained.batch["doubled"].tolist() == [0, 2, 4, 6, 8, 10]
    assert chained.batch["rank"].tolist() == [0, 0, 1, 1, 2, 2]


def test_failed_future_names_the_producing_rank(demo):
    expected = r"DemoWorker rank 1 \(actor DemoWorker_\w+_rank1\) failed in fail_later\(\)"
    with pytest.raises(WorkerError, match=expected) as info:
        demo.fail_later(rows(3)).get()
    assert "upstream broke on rank 1" in info.value.worker_traceback
    with pytest.raises(WorkerError, match="upstream broke on rank 1"):
        demo.mark(demo.fail_later(rows(3)))  # a consumer of the failed future fails with the original error


def test_async_registered_method(demo):
    assert demo.async_scaled(3) == [30, 31, 32]


def test_raising_worker_names_role_rank_and_carries_its_traceback(demo):
    with pytest.raises(WorkerError) as info:
        demo.fail_on(1)
    err = info.value
    assert (err.role, err.rank, err.method) == ("DemoWorker", 1, "fail_on")
    message = str(err)
    assert "DemoWorker rank 1" in message and "ValueError: bad input on rank 1" in message
    assert "_explode" in err.worker_traceback and "_explode" in message
    assert demo.scaled(1) == [10, 11, 12]  # an exception does not break the group


def test_call_timeout_names_the_late_rank(demo):
    demo.call_timeout_s = 1.0
    try:
        start = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match=r"DemoWorker.hang_on\(\) on rank\(s\) \[2\]") as info:
            demo.hang_on(2, 3.0)
        assert time.monotonic() - start < 2.5
        assert info.value.pending_ranks == [2]
    finally:
        demo.call_timeout_s = CALL_TIMEOUT_S
    assert demo.scaled(0) == [0, 1, 2]  # waits for the slow call to drain, then works again


def test_gloo_all_reduce_in_a_second_pool(colocated, demo):
    actor = colocated.spawn(prefix_set=["actor"])["actor"]
    assert actor.init_process_group() == [2, 2]
    assert actor.all_reduce([1.5, 2.5]) == [4.0, 4.0]
    assert colocated.master_port != demo.master_port  # each group has its own rendezvous


def test_colocated_roles_share_processes(colocated):
    groups = colocated.spawn(prefix_set={"actor", "critic"})
    actor, critic = groups["actor"], groups["critic"]
    a, c = actor.describe(), critic.describe()
    assert [x[:2] for x in a] == [("actor", 0), ("actor", 1)] and {x[3] for x in a} == {0.5}
    assert [x[:2] for x in c] == [("critic", 0), ("critic", 1)] and {x[3] for x in c} == {2.0}
    assert [x[2] for x in a] == [x[2] for x in c]  # same process per rank
    assert actor.update(rows(3)).batch["x"].tolist() == [100, 101, 102]
    assert critic.values(rows(3)).batch["values"].tolist() == [0.0, 2.0, 4.0]
    assert actor.ping() == ["actor-pong", "actor-pong"]
    assert not hasattr(critic, "update") and not hasattr(actor, "values")
    assert colocated.actor_describe() == a
    with pytest.raises(KeyError, match="role 'ref' is not part of this colocated group"):
        colocated.spawn(prefix_set=["ref"])


def test_pool_and_actor_names_are_unique_per_run(pools, demo):
    second = RayResourcePool([1], use_gpu=False, name_prefix="main")
    assert second.name_prefix != pools.get_resource_pool(Role.ActorRollout).name_prefix
    assert len(set(demo.worker_names)) == 3 and all(n.startswith("DemoWorker_") for n in demo.worker_names)


@pytest.fixture(scope="module")
def startup_pool(ray_cluster):
    pool = RayResourcePool([2], use_gpu=False, name_prefix="startup")
    yield pool
    pool.release()


def test_constructor_slower_than_the_startup_limit_fails_naming_the_key(startup_pool):
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError) as info:
        RayWorkerGroup(
            startup_pool,
            RayClassWithInitArgs(SlowStartWorker, seconds=60, slow_ranks=[0, 1]),
            startup_timeout_s=1,
            call_timeout_s=CALL_TIMEOUT_S,
        )
    assert time.monotonic() - start < 10, "the driver gave up after the limit, not after the constructors"
    message = str(info.value)
    assert "trainer.ray_wait_register_center_timeout" in message and "SlowStartWorker worker group" in message
    assert re.search(r"[01] of 2 workers started within 1s", message), message
    assert info.value.method == "__init__" and info.value.pending_ranks


def test_startup_error_counts_the_workers_that_answered_and_frees_the_pool(startup_pool):
    # 40 s lets rank 0 start on a busy machine (another test process beside it, the slots of the previous test's
    # killed group still being freed; 20 s was once too short in CI); rank 1 needs 120 s
    with pytest.raises(
        WorkerTimeoutError,
        match=r"1 of 2 workers started within 40s \(trainer\."
        r"ray_wait_register_center_timeout\); rank\(s\) \[1\]",
    ) as info:
        RayWorkerGroup(
            startup_pool,
            RayClassWithInitArgs(SlowStartWorker, seconds=120, slow_ranks=[1]),
            startup_timeout_s=40,
            call_timeout_s=CALL_TIMEOUT_S,
        )
    assert info.value.pending_ranks == [1]
    # the failed group's actors were killed: a normal start on the same slots works (and returns once all are up)
    group = RayWorkerGroup(
        startup_pool,
        RayClassWithInitArgs(SlowStartWorker, seconds=0, slow_ranks=[]),
        startup_timeout_s=60,
        call_timeout_s=CALL_TIMEOUT_S,
    )
    try:
        assert group.startup_timeout_s == 60.0
        assert group.whoami() == [0, 1]
    finally:
        group.shutdown()


def test_constructor_that_raises_is_reported_at_startup_by_rank(startup_pool):
    with pytest.raises(
        WorkerError,
        match=r"(?s)SlowStartWorker rank 1 .*__init__\(\).*ValueError: cannot start "
        r"rank 1",
    ):
        RayWorkerGroup(
            startup_pool,
            RayClassWithInitArgs(SlowStartWorker, seconds=0, slow_ranks=[1], fail=True),
            startup_timeout_s=60,
            call_timeout_s=CALL_TIMEOUT_S,
        )
    with pytest.raises(
        ValueError,
        match=r"startup_timeout_s \(trainer.ray_wait_register_center_timeout\) must be "
        r"> 0 seconds, got 0",
    ):
        RayWorkerGroup(
            startup_pool, RayClassWithInitArgs(SlowStartWorker, seconds=0, slow_ranks=[]), startup_timeout_s=0
        )


def test_unsatisfiable_pool_fails_with_a_named_error(ray_cluster):
    pool = RayResourcePool([1], use_gpu=False, name_prefix="huge", cpus_per_process=10_000, placement_timeout_s=1)
    with pytest.raises(TimeoutError, match="resource pool 'huge_[0-9a-f]+': could not reserve"):
        pool.get_placement_groups()
    manager = ResourcePoolManager({"big": [4]}, {Role.Actor: "big"}, device="cpu", cpus_per_process=10_000)
    with pytest.raises(ValueError, match=r"resource pools \['big'\] need 40000 CPU"):
        manager.create_resource_pool()


# Kills a process of the colocated group, so it must stay the last test using that group (file order).
def test_worker_killed_mid_call_is_reported_without_hanging(colocated):
    victim = colocated.spawn(prefix_set=["victim"])["victim"]
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        victim.die_on(1, 45)
    assert time.monotonic() - start < 30  # well before the survivor finishes or the timeout fires
    err = info.value
    assert err.rank == 1 and err.role == "victim"
    assert "fatal: optimizer state is corrupted on rank 1" in err.first_logged_error
    assert "victim rank 1" in str(err) and "optimizer state is corrupted" in str(err)
    with pytest.raises(WorkerDiedError, match="unusable: victim rank 1 died earlier"):
        victim.die_on(0, 0)
    with pytest.raises(WorkerDiedError, match="unusable"):
        colocated.spawn(prefix_set=["actor"])["actor"].describe()  # the other roles share the dead process
    colocated.shutdown()
    with pytest.raises(WorkerDiedError, match="worker group was shut down"):
        colocated.actor_describe()
