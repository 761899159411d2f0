"""Dispatch/collect functions and the WorkerGroup call path, driven through an in-process backend (no Ray)."""

import asyncio
import inspect
import os

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base import (
    Dispatch,
    Execute,
    PerRank,
    Worker,
    WorkerGroup,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.single_controller.base.dispatch import (
    PAD_SIZE_KEY,
    collect_dp_compute,
    collect_dp_compute_data_proto,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
)


class Size:
    def __init__(self, n):
        self.world_size = n


def rows(n, start=0):
    return DataProto.from_dict({"x": torch.arange(start, start + n)})


TP_MESH = make_nd_compute_dataproto_dispatch_fn("tp")


class EchoWorker(Worker):
    def __init__(self):
        super().__init__()
        # ranks (0,1) and (2,3) are tensor-parallel pairs; the first of each pair reports.
        self._register_dispatch_collect_info("tp", dp_rank=self.rank // 2, is_collect=self.rank % 2 == 0)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self, tag):
        return (tag, self.rank)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add_rank(self, data):
        return DataProto.from_dict({"x": data.batch["x"], "rank": torch.full((len(data),), self.rank)})

    @register(dispatch_mode=TP_MESH)
    def mesh_echo(self, data):
        return DataProto.from_dict({"x": data.batch["x"], "rank": torch.full((len(data),), self.rank)})

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def only_zero(self, value):
        return (value, self.rank)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def async_whoami(self):
        return self.rank


class LocalGroup(WorkerGroup):
    """Runs each 'remote' call synchronously in this process."""

    def __init__(self, world_size, monkeypatch):
        super().__init__(None, role="local")
        for rank in range(world_size):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world_size))
            self._workers.append(EchoWorker())
        self._bind_worker_method(EchoWorker)

    def _remote_call(self, rank, method_name, args, kwargs):
        result = getattr(self._workers[rank], method_name)(*args, **kwargs)
        return asyncio.run(result) if inspect.iscoroutine(result) else result

    def _wait(self, method_name, handles, ranks):
        return list(handles)

    def _make_data_proto_future(self, method_name, handles, ranks, pad_size):
        return ("future", handles, ranks, pad_size)


@pytest.fixture
def group(monkeypatch):
    return LocalGroup(4, monkeypatch)


def test_one_to_all_replicates_every_argument():
    args, kwargs = dispatch_one_to_all(Size(3), 1, key="v")
    assert args == (PerRank([1, 1, 1]),) and isinstance(args[0], PerRank)
    assert kwargs == {"key": PerRank(["v"] * 3)}


def test_dp_compute_requires_one_entry_per_rank():
    args, _ = dispatch_dp_compute(Size(2), [1, 2])
    assert args[0] == [1, 2]
    with pytest.raises(ValueError, match="argument #0 must be a list with one entry per rank \\(3\\)"):
        dispatch_dp_compute(Size(3), [1, 2])
    with pytest.raises(ValueError, match="argument 'weights'"):
        dispatch_dp_compute(Size(2), weights=5)
    with pytest.raises(ValueError, match="expected 2 outputs"):
        collect_dp_compute(Size(2), [1])


def test_dp_compute_proto_pads_uneven_batches():
    args, kwargs = dispatch_dp_compute_data_proto(Size(3), rows(7))
    assert kwargs[PAD_SIZE_KEY] == 2
    assert [len(c) for c in args[0]] == [3, 3, 3]
    assert args[0][2].batch["x"].tolist() == [6, 0, 1]  # padding repeats the first rows
    args, kwargs = dispatch_dp_compute_data_proto(Size(2), data=rows(4))
    assert PAD_SIZE_KEY not in kwargs and [len(c) for c in kwargs["data"]] == [2, 2]


def test_dp_compute_proto_rejects_other_types_and_mismatched_padding():
    with pytest.raises(TypeError, match="argument #1 must be a DataProto"):
        dispatch_dp_compute_data_proto(Size(2), rows(2), 5)
    with pytest.raises(ValueError, match="different padding"):
        dispatch_dp_compute_data_proto(Size(4), rows(5), rows(6))


def test_with_func_sends_the_function_and_chunks_the_rest():
    def fn(worker, data):
        return data

    args, _ = dispatch_dp_compute_data_proto_with_func(Size(2), fn, rows(4))
    assert list(args[0]) == [fn, fn] and [len(c) for c in args[1]] == [2, 2]
    with pytest.raises(TypeError, match="first argument must be a function"):
        dispatch_dp_compute_data_proto_with_func(Size(2), rows(4))


def test_collect_proto_names_the_rank_that_returned_the_wrong_type():
    with pytest.raises(TypeError, match="rank 1 returned dict"):
        collect_dp_compute_data_proto(Size(2), [rows(1), {"x": 1}])


def test_group_methods_are_bound_and_dispatched(group):
    assert group.whoami("t") == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    assert group.only_zero(5) == (5, 0)
    assert group.async_whoami() == [0, 1, 2, 3]
    assert set(group.bound_methods) >= {"whoami", "add_rank", "mesh_echo", "execute_with_func_generator"}


def test_group_unpads_after_collect(group):
    out = group.add_rank(rows(6))
    assert len(out) == 6
    assert out.batch["x"].tolist() == list(range(6))
    assert out.batch["rank"].tolist() == [0, 0, 1, 1, 2, 2]  # rank 3 held only padding


def test_mesh_dispatch_shares_shards_and_keeps_one_answer(group):
    assert group._query_dispatch_info("tp") == [0, 0, 1, 1]
    assert group._query_collect_info("tp") == [True, False, True, False]
    out = group.mesh_echo(rows(3))
    assert out.batch["x"].tolist() == [0, 1, 2]
    assert out.batch["rank"].tolist() == [0, 0, 2]


def test_nonblocking_proto_call_builds_a_future_from_collected_ranks(group):
    attrs = {"dispatch_mode": TP_MESH, "execute_mode": Execute.ALL, "blocking": False}
    method = group._make_group_method("mesh_echo", attrs)
    kind, handles, ranks, pad = method(rows(3))
    assert kind == "future" and ranks == [0, 2] and pad == 1


def test_execute_with_func_generator_and_rank_zero(group):
    def mark(worker, data):
        return DataProto.from_dict({"r": torch.full((len(data),), worker.rank)})

    assert group.execute_with_func_generator(mark, rows(4)).batch["r"].tolist() == [0, 1, 2, 3]
    assert group.execute_func_rank_zero(os.path.join, "a", "b") == os.path.join("a", "b")


def test_binding_refuses_names_that_shadow_group_attributes(monkeypatch):
    class Clashing(EchoWorker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def world_size(self):
            return 0

    group = LocalGroup(1, monkeypatch)
    with pytest.raises(ValueError, match="'world_size' of Clashing clashes"):
        group._bind_worker_method(Clashing)


def test_mesh_requires_every_dp_rank(monkeypatch):
    group = LocalGroup(2, monkeypatch)
    group._mesh_cache["tp"] = [(0, True), (2, True)]
    with pytest.raises(ValueError, match=r"dp ranks \[1\] have no worker"):
        group.mesh_echo(rows(2))
