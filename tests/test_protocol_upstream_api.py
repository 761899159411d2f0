"""The parts of verl.protocol that mirror upstream verl's API beyond the DataProto basics: error types, the
in-place union helpers, per-row repeats, summaries, subclass preservation, BatchData, collectives, package
extensions."""

import os
import socket
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.protocol import (
    BatchData,
    DataProto,
    DataProtoError,
    DataProtoFuture,
    all_gather_data_proto,
    union_numpy_dict,
    union_tensor_dict,
)
from verl.utils import tensordict_utils as tu


def rows(n: int, meta: dict | None = None) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n)}, non_tensors={"uid": [f"u{i}" for i in range(n)]}, meta_info=meta or {}
    )


def test_contract_errors_are_both_value_and_assertion_errors():
    assert issubclass(DataProtoError, ValueError) and issubclass(DataProtoError, AssertionError)
    with pytest.raises(AssertionError, match="Conflicting values for meta_info key 'config'"):
        DataProto.concat([rows(1, {"config": "A"}), rows(1, {"config": "B"})])


def test_module_union_helpers_merge_in_place_and_leave_the_target_alone_on_a_clash():
    td1, td2 = rows(3).batch, rows(3).batch.clone()
    td2["y"] = torch.ones(3)
    assert union_tensor_dict(td1, td2) is td1 and set(td1.keys()) == {"x", "y"}
    td3 = td2.clone()
    td3["x"] = td3["x"] + 1
    td3["z"] = torch.zeros(3)
    with pytest.raises(AssertionError, match="`x` in tensor_dict1 and tensor_dict2 are not the same object"):
        union_tensor_dict(td1, td3)
    assert "z" not in td1.keys()

    nan = np.array([1.0, np.nan])
    target = {"a": nan}
    assert union_numpy_dict(target, {"a": nan.copy(), "b": np.zeros(2)}) is target and set(target) == {"a", "b"}
    loop_a, loop_b = np.empty(1, dtype=object), np.empty(1, dtype=object)
    loop_a[0], loop_b[0] = loop_a, loop_b
    union_numpy_dict({"c": loop_a}, {"c": loop_b})  # self-referencing rows compare without recursing forever
    with pytest.raises(ValueError, match="union conflict: non_tensor_batch key 'a'"):
        union_numpy_dict(target, {"a": np.array([np.nan, 1.0]), "new": np.zeros(2)})
    assert "new" not in target


def test_sample_level_repeat_repeats_each_row_its_own_number_of_times():
    data = rows(3, {"k": 1})
    for counts in ([2, 0, 1], (2, 0, 1), np.array([2, 0, 1]), torch.tensor([2, 0, 1])):
        out = data.sample_level_repeat(counts)
        assert out.batch["x"].tolist() == [0, 0, 2] and out.non_tensor_batch["uid"].tolist() == ["u0", "u0", "u2"]
        assert out.meta_info == {"k": 1}
    with pytest.raises(ValueError, match=r"needs one count per row \(3\), got shape \[2\]"):
        data.sample_level_repeat([1, 1])
    with pytest.raises(ValueError, match="repeat counts must be non-negative ints"):
        data.sample_level_repeat([1, -1, 1])


def test_size_and_data_info_summaries(capsys):
    data = DataProto.from_dict(
        tensors={"x": torch.zeros(4, 2)}, non_tensors={"s": np.zeros(4)}, meta_info={"m": [1, "a"], "d": {"k": 2.0}}
    )
    data.print_size(prefix="rollout")
    assert capsys.readouterr().out.startswith("rollout, Size of tensordict: ")
    info = data.get_data_info()
    assert "  x: (4, 2) (torch.float32) cpu" in info and "  s: ndarray(4,) (float64)" in info
    assert "  m: list[int|str]" in info and "  d: dict[str: float]" in info


def test_row_operations_keep_a_dataproto_subclass():
    class Tagged(DataProto):
        pass

    data = Tagged.from_dict(tensors={"x": torch.arange(4)})
    derived = [data[1:], data[[0, 1]], data.select(), data.repeat(2), data.chunk(2)[0], Tagged.concat([data, data])]
    assert all(type(d) is Tagged for d in derived)


def test_futures_collect_and_split_tensordict_results_too():
    future = DataProtoFuture.concat([])
    parts = [tu.get_tensordict({"x": torch.arange(2) + 2 * i}, {"step": i}) for i in range(2)]
    merged = future.collect_fn(parts)
    assert merged["x"].tolist() == [0, 1, 2, 3] and tu.get(merged, "step") == 0
    second = future.chunk(2)[1]
    assert second.dispatch_fn(merged)["x"].tolist() == [2, 3]


def test_batch_data_chunks_and_concatenates_each_batch_type():
    data = rows(4)
    assert BatchData(data).is_chunkable() and not BatchData([1]).is_chunkable()
    assert [len(p) for p in BatchData(data).chunk(2)] == [2, 2]
    assert BatchData(list(data.chunk(2))).concat().batch["x"].tolist() == [0, 1, 2, 3]
    td = data.to_tensordict()
    td_parts = BatchData(td).chunk(2)
    assert isinstance(td_parts, tuple) and tu.get(td_parts[1], "uid") == ["u2", "u3"]
    assert BatchData(list(td_parts)).is_concatable() and not BatchData([]).is_concatable()
    assert BatchData(list(td_parts)).concat()["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="cannot chunk a list"):
        BatchData([1, 2]).chunk(2)
    with pytest.raises(ValueError, match="needs a non-empty list"):
        BatchData([]).concat()


def _gather_worker(rank: int, world: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        data = DataProto.from_dict(
            tensors={"x": torch.full((2,), rank)}, non_tensors={"r": [f"r{rank}"] * 2}, meta_info={"rank": rank}
        )
        all_gather_data_proto(data, process_group=None)
        results.put((rank, data.batch["x"].tolist(), data.non_tensor_batch["r"].tolist(), data.meta_info))
    finally:
        dist.destroy_process_group()


def test_all_gather_data_proto_concatenates_rows_in_rank_order():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("fork")  # children inherit the imported modules: no second torch import
    results = ctx.SimpleQueue()
    mp.start_processes(_gather_worker, args=(2, port, results), nprocs=2, join=True, start_method="fork")
    by_rank = {rank: rest for rank, *rest in (results.get() for _ in range(2))}
    for rank in (0, 1):
        assert by_rank[rank] == [[0, 0, 1, 1], ["r0", "r0", "r1", "r1"], {"rank": rank}]  # meta_info stays local


def test_import_verl_loads_external_modules_and_plugins(tmp_path, monkeypatch, caplog):
    import verl

    (tmp_path / "my_verl_ext.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", " my_verl_ext ,")
    verl._import_external_modules()
    assert sys.modules["my_verl_ext"].LOADED
    assert os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"]  # set (by default to "0") when verl is imported

    class Entry:
        def __init__(self, name, fail=False):
            self.name, self.value, self.fail = name, f"pkg:{name}", fail

        def load(self):
            loaded.append(self.name)
            if self.fail:
                raise RuntimeError("broken plugin")

    loaded: list[str] = []
    entries = [Entry("good"), Entry("bad", fail=True), Entry("other")]
    monkeypatch.setattr(verl, "entry_points", lambda group: entries if group == "verl.plugins" else [])
    verl._load_plugins()
    assert loaded == ["good", "bad", "other"] and "verl plugin 'bad' (pkg:bad) failed to load" in caplog.text
    for policy, expected in (("none", []), ("good, other", ["good", "other"])):
        loaded.clear()
        monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", policy)
        verl._load_plugins()
        assert loaded == expected
