"""DataProto behaviour: construction, indexing, column ops, reshaping, concat/union rules, iteration, padding."""

import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl import DataProto
from verl.protocol import (
    DataProtoFuture,
    DataProtoItem,
    collate_fn,
    pad_dataproto_to_divisor,
    unpad_dataproto,
)


def make_dp(n: int = 6, meta: dict | None = None) -> DataProto:
    return DataProto.from_dict(
        tensors={
            "prompts": torch.arange(n * 3).view(n, 3),
            "responses": torch.arange(n * 2, dtype=torch.float32).view(n, 2) / 7,
        },
        non_tensors={"uid": [f"u{i}" for i in range(n)], "reward_model": [{"ground_truth": i} for i in range(n)]},
        meta_info=meta if meta is not None else {"temperature": 1.0},
    )


def assert_dp_equal(a: DataProto, b: DataProto, meta: bool = True) -> None:
    assert len(a) == len(b)
    assert (a.batch is None) == (b.batch is None)
    if a.batch is not None:
        assert sorted(a.batch.keys()) == sorted(b.batch.keys())
        for key in a.batch.keys():
            assert a.batch[key].dtype == b.batch[key].dtype, key
            assert torch.equal(a.batch[key], b.batch[key]), key
    assert list(a.non_tensor_batch) == list(b.non_tensor_batch)
    for key in a.non_tensor_batch:
        assert a.non_tensor_batch[key].tolist() == b.non_tensor_batch[key].tolist(), key
    if meta:
        assert a.meta_info == b.meta_info


def prompts_first_col(dp: DataProto) -> list[int]:
    return (dp.batch["prompts"][:, 0] // 3).tolist()


# ------------------------------------------------------------------------------------------------ construction


def test_package_exports_dataproto_and_version():
    import verl

    assert verl.DataProto is DataProto
    assert isinstance(verl.__version__, str) and verl.__version__


def test_from_dict_builds_aligned_parts():
    dp = make_dp(4)
    assert len(dp) == 4
    assert isinstance(dp.batch, TensorDict) and list(dp.batch.batch_size) == [4]
    assert dp.non_tensor_batch["uid"].dtype == object
    assert dp.meta_info == {"temperature": 1.0}


def test_from_dict_keeps_equal_length_inner_lists_as_one_object_per_row():
    dp = DataProto.from_dict(non_tensors={"msgs": [[1, 2], [3, 4], [5, 6]]})
    assert dp.non_tensor_batch["msgs"].shape == (3,)
    assert dp.non_tensor_batch["msgs"][1] == [3, 4]
    assert dp.batch is None and len(dp) == 3


def test_from_dict_rejects_mismatched_tensor_batch_sizes_naming_keys():
    with pytest.raises(ValueError, match=r"tensors\['responses'\] has leading shape \[3\] but tensors\['prompts'\]"):
        DataProto.from_dict({"prompts": torch.zeros(4, 2), "responses": torch.zeros(3, 2)})


def test_from_dict_rejects_non_tensor_with_wrong_row_count_naming_key():
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has 3 rows but the tensor batch"):
        DataProto.from_dict({"prompts": torch.zeros(4, 2)}, {"uid": ["a", "b", "c"]})


def test_from_dict_rejects_non_tensor_values_among_tensors():
    with pytest.raises(TypeError, match=r"tensors\['uid'\] must be a torch.Tensor, got list"):
        DataProto.from_dict({"uid": ["a"]})
    with pytest.raises(TypeError, match=r"non-tensor 'uid' must be a numpy array, list or tuple, got int"):
        DataProto.from_dict(non_tensors={"uid": 3})


def test_from_dict_keeps_exactly_one_batch_dim():
    dp = DataProto.from_dict({"x": torch.zeros(2, 3, 4)}, num_batch_dims=1)
    assert list(dp.batch.batch_size) == [2] and len(dp) == 2
    # upstream verl signals this with an assert: the error is both an AssertionError and a ValueError
    for error in (ValueError, AssertionError):
        with pytest.raises(error, match="keeps exactly one batch dimension, got num_batch_dims=2"):
            DataProto.from_dict({"x": torch.zeros(2, 3, 4)}, num_batch_dims=2)
    with pytest.raises(ValueError, match=r"tensors\['s'\] has 0 dims, fewer than num_batch_dims=1"):
        DataProto.from_dict({"s": torch.tensor(1.0)})
    with pytest.raises(ValueError, match="num_batch_dims must be a positive int, got 0"):
        DataProto.from_dict({"x": torch.zeros(2)}, num_batch_dims=0)


def test_from_single_dict_splits_by_type():
    dp = DataProto.from_single_dict(
        {"input_ids": torch.ones(2, 3), "uid": np.array(["a", "b"], dtype=object), "extra": ["x", "y"]},
        meta_info={"k": 1},
    )
    assert list(dp.batch.keys()) == ["input_ids"]
    assert set(dp.non_tensor_batch) == {"uid", "extra"}
    assert dp.meta_info == {"k": 1}
    with pytest.raises(TypeError, match="value of 'bad' must be a torch.Tensor, numpy array, list or tuple, got int"):
        DataProto.from_single_dict({"bad": 3})


def test_constructor_consistency_checks_name_the_culprit():
    td = TensorDict({"x": torch.zeros(3)}, batch_size=[3])
    with pytest.raises(TypeError, match=r"non_tensor_batch\['uid'\] must be a numpy array"):
        DataProto(batch=td, non_tensor_batch={"uid": ["a", "b", "c"]})
    with pytest.raises(TypeError, match="DataProto.batch must be a tensordict.TensorDict"):
        DataProto(batch={"x": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['b'\] has 2 rows but non_tensor_batch\['a'\] has 3"):
        DataProto(non_tensor_batch={"a": np.zeros(3), "b": np.zeros(2)})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['a'\] must have one row per sample"):
        DataProto(non_tensor_batch={"a": np.array(1)})
    with pytest.raises(ValueError, match="needs a leading batch dimension"):
        DataProto(batch=TensorDict({"x": torch.zeros(3)}, batch_size=[]))
    with pytest.raises(ValueError, match="needs exactly one batch dimension"):
        DataProto(batch=TensorDict({"x": torch.zeros(3, 2)}, batch_size=[3, 2]), non_tensor_batch={"a": np.zeros(3)})
    with pytest.raises(TypeError, match="meta_info must be a dict, got list"):
        DataProto(meta_info=[1])


def test_batch_none_and_meta_only_dataprotos():
    dp = DataProto.from_dict(non_tensors={"uid": ["a", "b", "c"]})
    assert dp.batch is None and len(dp) == 3
    assert dp[1:].non_tensor_batch["uid"].tolist() == ["b", "c"]
    assert [len(c) for c in dp.chunk_balanced(2)] == [2, 1]
    assert DataProto.concat(dp.chunk(3)).non_tensor_batch["uid"].tolist() == ["a", "b", "c"]
    meta_only = DataProto(meta_info={"step": 3})
    assert len(meta_only) == 0 and meta_only.batch is None
    assert DataProto(non_tensor_batch=None, meta_info=None).meta_info == {}


def test_repr_summarizes_keys_shapes_and_meta():
    text = repr(make_dp(4))
    assert "DataProto(len=4" in text
    assert "batch['prompts']: int64[4, 3] cpu" in text
    assert "non_tensor_batch['uid']: object[4]" in text
    assert "meta_info keys: ['temperature']" in text
    assert str(make_dp(2)).startswith("DataProto(len=2")


# ---------------------------------------------------------------------------------------------------- indexing


def test_int_index_gives_item_and_iteration_walks_rows():
    dp = make_dp(4)
    item = dp[1]
    assert isinstance(item, DataProtoItem)
    assert item.batch["prompts"].tolist() == [3, 4, 5]
    assert item.non_tensor_batch["uid"] == "u1"
    assert item.meta_info == {"temperature": 1.0}
    assert dp[-1].non_tensor_batch["uid"] == "u3"
    assert dp[np.int64(2)].non_tensor_batch["uid"] == "u2"
    assert [it.non_tensor_batch["uid"] for it in dp] == ["u0", "u1", "u2", "u3"]
    with pytest.raises(IndexError, match="row index 4 is out of range for a DataProto of 4 rows"):
        dp[4]


def test_slice_is_a_view():
    dp = make_dp(6)
    part = dp[1:4]
    assert isinstance(part, DataProto) and len(part) == 3
    assert part.non_tensor_batch["uid"].tolist() == ["u1", "u2", "u3"]
    part.batch["prompts"][0, 0] = -1
    assert dp.batch["prompts"][1, 0] == -1
    assert prompts_first_col(dp.slice(0, 6, 2)) == [0, 2, 4]


@pytest.mark.parametrize(
    "idx",
    [[4, 0, -1], np.array([4, 0, 5]), torch.tensor([4, 0, 5]), (4, 0, 5)],
)
def test_integer_sequences_select_rows(idx):
    dp = make_dp(6)
    picked = dp[idx]
    assert prompts_first_col(picked) == [4, 0, 5]
    assert picked.non_tensor_batch["uid"].tolist() == ["u4", "u0", "u5"]
    assert prompts_first_col(dp.select_idxs(idx)) == [4, 0, 5]


@pytest.mark.parametrize("make_mask", [list, np.array, torch.tensor])
def test_boolean_masks_select_rows(make_mask):
    dp = make_dp(4)
    mask = make_mask([True, False, False, True])
    assert dp.select_idxs(mask).non_tensor_batch["uid"].tolist() == ["u0", "u3"]
    assert prompts_first_col(dp[mask]) == [0, 3]


def test_bad_indices_have_clear_errors():
    dp = make_dp(4)
    with pytest.raises(IndexError, match="boolean mask has 3 entries but the DataProto has 4 rows"):
        dp.select_idxs([True, False, True])
    with pytest.raises(IndexError, match="row index 9 is out of range for a DataProto of 4 rows"):
        dp[[0, 9]]
    with pytest.raises(IndexError, match="row index -5 is out of range"):
        dp.select_idxs(torch.tensor([-5]))
    with pytest.raises(TypeError, match="row indices must be integers or booleans, got dtype torch.float32"):
        dp[torch.tensor([0.0, 1.0])]
    with pytest.raises(TypeError, match="use data.batch\\[key\\]"):
        dp["prompts"]
    with pytest.raises(IndexError, match="row index must be 1-D"):
        dp[torch.zeros(2, 2, dtype=torch.long)]
    assert len(dp[[]]) == 0


# ---------------------------------------------------------------------------------------------- column access


def test_select_keeps_named_keys_and_rejects_unknown_ones():
    dp = make_dp(3, meta={"temperature": 1.0, "step": 2})
    sub = dp.select(batch_keys=["prompts"], non_tensor_batch_keys=["uid"], meta_info_keys=["step"])
    assert list(sub.batch.keys()) == ["prompts"]
    assert list(sub.non_tensor_batch) == ["uid"]
    assert sub.meta_info == {"step": 2}
    assert_dp_equal(dp.select(), dp)
    with pytest.raises(KeyError, match="batch key 'nope' not found; available: \\['prompts', 'responses'\\]"):
        dp.select(batch_keys=["nope"])
    with pytest.raises(KeyError, match="non_tensor_batch key 'nope' not found"):
        dp.select(non_tensor_batch_keys="nope")
    with pytest.raises(KeyError, match="meta_info key 'nope' not found"):
        dp.select(meta_info_keys=["nope"])
    with pytest.raises(KeyError, match="no tensor batch"):
        DataProto.from_dict(non_tensors={"a": [1]}).select(batch_keys=["x"])


def test_select_deepcopy_is_independent():
    dp = make_dp(3)
    shallow = dp.select(batch_keys=["prompts"], non_tensor_batch_keys=["reward_model"])
    deep = dp.select(batch_keys=["prompts"], non_tensor_batch_keys=["reward_model"], deepcopy=True)
    dp.batch["prompts"][0, 0] = 100
    dp.non_tensor_batch["reward_model"][0]["ground_truth"] = "changed"
    assert shallow.batch["prompts"][0, 0] == 100
    assert deep.batch["prompts"][0, 0] == 0
    assert deep.non_tensor_batch["reward_model"][0] == {"ground_truth": 0}


def test_pop_moves_keys_out_atomically():
    dp = make_dp(3, meta={"temperature": 1.0, "step": 2})
    other_view = dp.select()
    popped = dp.pop(batch_keys=["responses"], non_tensor_batch_keys=["uid"], meta_info_keys=["step"])
    assert list(popped.batch.keys()) == ["responses"] and len(popped) == 3
    assert list(popped.non_tensor_batch) == ["uid"] and popped.meta_info == {"step": 2}
    assert list(dp.batch.keys()) == ["prompts"]
    assert list(dp.non_tensor_batch) == ["reward_model"] and dp.meta_info == {"temperature": 1.0}
    assert "responses" in other_view.batch.keys()  # a DataProto sharing the TensorDict is untouched
    with pytest.raises(KeyError, match="non_tensor_batch key 'uid' not found"):
        dp.pop(batch_keys=["prompts"], non_tensor_batch_keys=["uid"])
    assert "prompts" in dp.batch.keys()  # failed pop removed nothing
    assert len(dp.pop()) == 3


def test_rename_batch_and_non_tensor_keys():
    dp = make_dp(2)
    assert dp.rename("responses", "old_log_probs") is dp
    assert set(dp.batch.keys()) == {"prompts", "old_log_probs"}
    dp.rename(["uid", "prompts"], ["group", "input_ids"])
    assert list(dp.non_tensor_batch) == ["group", "reward_model"]
    assert set(dp.batch.keys()) == {"input_ids", "old_log_probs"}
    with pytest.raises(KeyError, match="rename: key 'missing' is in neither batch nor non_tensor_batch"):
        dp.rename("missing", "x")
    with pytest.raises(ValueError, match="rename: target key 'group' already exists"):
        dp.rename("input_ids", "group")
    with pytest.raises(ValueError, match="as many new keys as old keys"):
        dp.rename(["input_ids"], ["a", "b"])


# -------------------------------------------------------------------------------------------------- reshaping


def test_reorder_permutes_all_parts_in_place():
    dp = make_dp(4)
    assert dp.reorder(torch.tensor([2, 0, 3, 1])) is None
    assert prompts_first_col(dp) == [2, 0, 3, 1]
    assert dp.non_tensor_batch["uid"].tolist() == ["u2", "u0", "u3", "u1"]
    with pytest.raises(ValueError, match=r"reorder needs a permutation of range\(4\)"):
        dp.reorder([0, 0, 1, 2])
    with pytest.raises(ValueError, match="permutation"):
        dp.reorder([0, 1])


def test_repeat_interleaved_and_tiled():
    dp = make_dp(2, meta={"temperature": 0.5})
    inter = dp.repeat(3, interleave=True)
    assert prompts_first_col(inter) == [0, 0, 0, 1, 1, 1]
    assert inter.non_tensor_batch["uid"].tolist() == ["u0"] * 3 + ["u1"] * 3
    tiled = dp.repeat(repeat_times=2, interleave=False)
    assert prompts_first_col(tiled) == [0, 1, 0, 1]
    assert tiled.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0", "u1"]
    assert tiled.meta_info == {"temperature": 0.5}
    with pytest.raises(ValueError, match="repeat_times must be a positive int, got 0"):
        dp.repeat(0)


def test_chunk_even_and_uneven_and_concat_restores():
    dp = make_dp(10)
    assert [len(c) for c in dp.chunk(5)] == [2] * 5
    chunks = dp.chunk_balanced(4)
    assert [len(c) for c in chunks] == [3, 3, 2, 2]
    assert prompts_first_col(chunks[2]) == [6, 7]
    assert all(c.meta_info == dp.meta_info for c in chunks)
    assert_dp_equal(DataProto.concat(chunks), dp)


def test_chunk_needs_equal_parts_unless_auto_padding(monkeypatch):
    from verl.protocol import DataProtoConfig

    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)
    dp = make_dp(10)
    for error in (ValueError, AssertionError):  # upstream verl asserts here
        with pytest.raises(error, match="cannot chunk 10 rows into 4 chunks of equal size"):
            dp.chunk(4)
    marked = DataProto.from_dict(dict(dp.batch.items()), dp.non_tensor_batch, {"k": 1}, auto_padding=True)
    assert marked.is_padding_enabled() and [len(c) for c in marked.chunk(4)] == [3, 3, 2, 2]
    monkeypatch.setattr(DataProtoConfig, "_settings", {})
    DataProtoConfig.auto_padding = True
    assert dp.is_padding_enabled() and len(dp.chunk(4)) == 4
    DataProtoConfig.auto_padding = False
    assert not dp.is_padding_enabled()
    monkeypatch.setenv("VERL_AUTO_PADDING", "TRUE")
    assert DataProtoConfig.auto_padding and dp.is_padding_enabled()
    with pytest.raises(TypeError, match="auto_padding must be a bool"):
        DataProtoConfig.auto_padding = 1


def test_padding_appends_copies_of_the_last_or_first_row_in_place():
    dp = make_dp(3)
    assert dp.padding(2) is None and len(dp) == 5
    assert prompts_first_col(dp) == [0, 1, 2, 2, 2]
    assert dp.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2", "u2", "u2"]
    dp.padding(1, padding_candidate="first")
    assert prompts_first_col(dp)[-1] == 0
    dp.padding(0)
    assert len(dp) == 6
    with pytest.raises(ValueError, match="no row to copy"):
        DataProto(meta_info={"a": 1}).padding(1)


def test_chunk_rejects_bad_counts():
    dp = make_dp(3)
    with pytest.raises(ValueError, match=r"cannot chunk 3 rows into 4 chunks.*pad_dataproto_to_divisor\(data, 4\)"):
        dp.chunk(4)
    for bad in (0, -1, "2", True, 2.0):
        with pytest.raises(ValueError, match="chunks must be a positive int"):
            dp.chunk(bad)


def test_chunk_of_empty_dataproto_gives_empty_parts_keeping_meta():
    parts = DataProto(meta_info={"cmd": "save"}).chunk(3)
    assert len(parts) == 3 and all(len(p) == 0 and p.meta_info == {"cmd": "save"} for p in parts)


def test_split_and_concat_restore():
    dp = make_dp(7)
    parts = dp.split(3)
    assert [len(p) for p in parts] == [3, 3, 1]
    assert_dp_equal(DataProto.concat(parts), dp)
    assert [len(p) for p in dp.split(7)] == [7]
    assert len(make_dp(0).split(2)) == 1
    with pytest.raises(ValueError, match="split_size must be a positive int, got 0"):
        dp.split(0)


# ------------------------------------------------------------------------------------------------------ concat


def test_concat_meta_info_rule():
    a = make_dp(2, meta={"temperature": 1.0, "metrics": {"loss": 0.5, "lr": [1e-3]}})
    b = make_dp(2, meta={"temperature": 1.0, "only_b": "x", "metrics": {"loss": 0.25}})
    out = DataProto.concat([a, b])
    assert len(out) == 4
    assert out.meta_info == {"temperature": 1.0, "metrics": {"loss": [0.5, 0.25], "lr": [1e-3]}, "only_b": "x"}
    c = make_dp(1, meta={"metrics": {"loss": 0.0}})
    nested = DataProto.concat([out, c])
    flat = DataProto.concat([a, b, c])
    assert nested.meta_info["metrics"] == flat.meta_info["metrics"] == {"loss": [0.5, 0.25, 0.0], "lr": [1e-3]}
    listed = DataProto.concat([make_dp(1, meta={"metrics": [{"x": 1}, {"x": 2}]}), make_dp(1, meta={})])
    assert listed.meta_info == {"metrics": {"x": [1, 2]}}


def test_concat_rejects_conflicting_meta_info_naming_key():
    a, b = make_dp(2, meta={"temperature": 1.0}), make_dp(2, meta={"temperature": 0.7})
    with pytest.raises(ValueError, match=r"meta_info\['temperature'\] differs between parts \(1.0 vs 0.7 in part 1\)"):
        DataProto.concat([a, b])
    with pytest.raises(TypeError, match=r"meta_info\['metrics'\] must be a dict \(or a list of dicts\), got float"):
        DataProto.concat([make_dp(1, meta={"metrics": 1.0})])
    same = DataProto.concat([make_dp(1, meta={"t": torch.tensor([1.0])}), make_dp(1, meta={"t": torch.tensor([1.0])})])
    assert torch.equal(same.meta_info["t"], torch.tensor([1.0]))


def test_concat_rejects_mismatched_keys_and_inputs():
    a = make_dp(2)
    b = make_dp(2).pop(batch_keys=["prompts"], non_tensor_batch_keys=["uid", "reward_model"])
    with pytest.raises(ValueError, match="batch key 'responses' is not in every part"):
        DataProto.concat([a, b])
    c = make_dp(2)
    c.non_tensor_batch.pop("uid")
    with pytest.raises(ValueError, match="non_tensor_batch key 'uid' is missing from part 1"):
        DataProto.concat([a, c])
    with pytest.raises(ValueError, match="non_tensor_batch key 'uid' is missing from part 0"):
        DataProto.concat([c, a])
    with pytest.raises(ValueError, match="part 0 has a tensor batch but part 1 has none"):
        DataProto.concat([a, DataProto.from_dict(non_tensors={"uid": ["x"], "reward_model": [{}]})])
    with pytest.raises(ValueError, match="needs at least one DataProto"):
        DataProto.concat([])
    with pytest.raises(TypeError, match="part 1 is a dict, not a DataProto"):
        DataProto.concat([a, {}])


# ------------------------------------------------------------------------------------------------------- union


def test_values_equal_is_structural():
    from verl.utils.dataproto_merge import values_equal

    class Ambiguous:
        def __eq__(self, other):
            raise RuntimeError("no comparison")

    assert values_equal({"a": [1, np.array([2, 3])]}, {"a": [1, np.array([2, 3])]})
    assert not values_equal({"a": [1, 2]}, {"a": (1, 2)})
    assert not values_equal(np.array([1, 2]), [1, 2])
    assert not values_equal(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert values_equal(np.array([{"x": 1}], dtype=object), np.array([{"x": 1}], dtype=object))
    assert not values_equal(Ambiguous(), Ambiguous())


def test_union_adds_keys_and_returns_self():
    dp = make_dp(3)
    extra = DataProto.from_dict(
        {"values": torch.ones(3, 2), "prompts": dp.batch["prompts"].clone()},
        {"uid": dp.non_tensor_batch["uid"].copy(), "data_source": ["d"] * 3},
        {"temperature": 1.0, "step": 4},
    )
    assert dp.union(extra) is dp
    assert set(dp.batch.keys()) == {"prompts", "responses", "values"}
    assert set(dp.non_tensor_batch) == {"uid", "reward_model", "data_source"}
    assert dp.meta_info == {"temperature": 1.0, "step": 4}
    nan = torch.tensor([[float("nan")]] * 3)
    left, right = DataProto.from_dict({"x": nan}), DataProto.from_dict({"x": nan.clone()})
    assert torch.isnan(left.union(right).batch["x"]).all()


def test_union_clash_raises_naming_key_and_changes_nothing():
    dp = make_dp(3)
    bad = DataProto.from_dict({"values": torch.ones(3), "responses": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match="union conflict: batch key 'responses' holds different values"):
        dp.union(bad)
    assert "values" not in dp.batch.keys()
    with pytest.raises(ValueError, match="union conflict: non_tensor_batch key 'uid'"):
        dp.union(DataProto.from_dict(non_tensors={"uid": ["a", "b", "c"]}))
    with pytest.raises(ValueError, match="union conflict: meta_info key 'temperature'"):
        dp.union(DataProto(meta_info={"temperature": 2.0}))
    with pytest.raises(ValueError, match="cannot union DataProtos of 3 and 2 rows"):
        dp.union(make_dp(2))
    with pytest.raises(TypeError, match="needs a DataProto, got dict"):
        dp.union({})


def test_union_with_missing_batches():
    objs = DataProto.from_dict(non_tensors={"uid": ["a", "b"]})
    objs.union(DataProto.from_dict({"x": torch.ones(2)}))
    assert list(objs.batch.keys()) == ["x"] and len(objs) == 2
    tensors = DataProto.from_dict({"x": torch.ones(2)})
    tensors.union(DataProto(meta_info={"m": 1}))
    assert tensors.meta_info == {"m": 1} and len(tensors) == 2


# ----------------------------------------------------------------------------------------- movement, iteration


def test_to_device_moves_batch_and_returns_self():
    dp = make_dp(2)
    assert dp.to("cpu") is dp
    assert dp.to(torch.device("meta")).batch["prompts"].device.type == "meta"
    assert DataProto.from_dict(non_tensors={"a": [1]}).to("cpu").batch is None


@pytest.mark.gpu
def test_to_cuda_and_index_on_device():
    dp = make_dp(4).to("cuda")
    assert dp.batch["prompts"].is_cuda
    assert prompts_first_col(dp[[3, 1]]) == [3, 1]
    back = pickle.loads(pickle.dumps(dp, protocol=5))
    assert back.batch["prompts"].device.type == "cpu"
    assert torch.equal(back.batch["prompts"], dp.batch["prompts"].cpu())


def test_make_iterator_epochs_shuffle_and_determinism():
    dp = make_dp(10, meta={"temperature": 0.9})
    batches = list(dp.make_iterator(mini_batch_size=4, epochs=2, seed=7, dataloader_kwargs={"shuffle": True}))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    assert all(isinstance(b, DataProto) and b.meta_info == {"temperature": 0.9} for b in batches)
    epoch1 = sum((prompts_first_col(b) for b in batches[:3]), [])
    epoch2 = sum((prompts_first_col(b) for b in batches[3:]), [])
    assert sorted(epoch1) == sorted(epoch2) == list(range(10))
    assert epoch1 != list(range(10)) and epoch1 != epoch2
    again = [prompts_first_col(b) for b in dp.make_iterator(4, 2, seed=7, dataloader_kwargs={"shuffle": True})]
    assert again == [prompts_first_col(b) for b in batches]
    for b in batches:  # rows stay aligned with their objects
        assert [f"u{i}" for i in prompts_first_col(b)] == b.non_tensor_batch["uid"].tolist()


def test_make_iterator_options_and_errors():
    dp = make_dp(5)
    ordered = [prompts_first_col(b) for b in dp.make_iterator(2, 1)]  # no shuffle unless asked, as upstream
    assert ordered == [[0, 1], [2, 3], [4]]
    dropped = list(dp.make_iterator(2, 1, seed=0, dataloader_kwargs={"drop_last": True}))
    assert [len(b) for b in dropped] == [2, 2]
    assert list(dp.make_iterator(2, 0)) == []
    with pytest.raises(ValueError, match="unsupported dataloader_kwargs key 'num_workers'"):
        dp.make_iterator(2, 1, dataloader_kwargs={"num_workers": 2})
    with pytest.raises(ValueError, match="mini_batch_size must be a positive int, got 0"):
        dp.make_iterator(0, 1)
    with pytest.raises(ValueError, match="epochs must be a non-negative int, got -1"):
        dp.make_iterator(2, -1)


def test_save_and_load_from_disk(tmp_path):
    dp = make_dp(4, meta={"metrics": {"a": [1]}})
    path = tmp_path / "dp.pkl"
    dp.save_to_disk(path)
    loaded = DataProto.load_from_disk(str(path))
    assert_dp_equal(loaded, dp)
    loaded.batch["prompts"][0, 0] = 5  # loaded tensors are writable and private
    assert dp.batch["prompts"][0, 0] == 0
    with open(tmp_path / "other.pkl", "wb") as f:
        pickle.dump({"not": "a DataProto"}, f)
    with pytest.raises(TypeError, match="other.pkl holds a dict, not a DataProto"):
        DataProto.load_from_disk(tmp_path / "other.pkl")


# ----------------------------------------------------------------------------------------------------- padding


def test_pad_to_divisor_repeats_leading_rows_and_unpad_restores():
    dp = make_dp(5, meta={"metrics": {"m": 1}})
    padded, pad = pad_dataproto_to_divisor(dp, 4)
    assert pad == 3 and len(padded) == 8
    assert prompts_first_col(padded) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert padded.non_tensor_batch["uid"].tolist()[5:] == ["u0", "u1", "u2"]
    assert padded.meta_info == {"metrics": {"m": 1}}  # padding never duplicates metrics
    assert_dp_equal(unpad_dataproto(padded, pad), dp)
    assert [len(c) for c in padded.chunk(4)] == [2, 2, 2, 2]


def test_pad_wraps_around_when_pad_exceeds_len_and_noop_when_divisible():
    tiny = make_dp(2)
    padded, pad = pad_dataproto_to_divisor(tiny, 7)
    assert pad == 5 and prompts_first_col(padded) == [0, 1, 0, 1, 0, 1, 0]
    same, pad = pad_dataproto_to_divisor(make_dp(4), 2)
    assert pad == 0 and len(same) == 4
    assert unpad_dataproto(same, 0) is same


def test_pad_and_unpad_reject_bad_sizes():
    with pytest.raises(ValueError, match="size_divisor must be a positive int, got 0"):
        pad_dataproto_to_divisor(make_dp(2), 0)
    with pytest.raises(ValueError, match=r"pad_size must be an int in \[0, 2\], got 3"):
        unpad_dataproto(make_dp(2), 3)
    with pytest.raises(ValueError, match="pad_size must be an int"):
        unpad_dataproto(make_dp(2), -1)


# ------------------------------------------------------------------------------------------------------ collate


def test_collate_fn_rebuilds_dataproto_from_items():
    dp = make_dp(4)
    loader = torch.utils.data.DataLoader(list(dp), batch_size=4, collate_fn=collate_fn)
    rebuilt = next(iter(loader))
    assert_dp_equal(rebuilt, dp)
    with pytest.raises(ValueError, match="needs at least one DataProtoItem"):
        collate_fn([])
    with pytest.raises(ValueError, match="non_tensor_batch key 'uid' is missing from item 1"):
        collate_fn([DataProtoItem(non_tensor_batch={"uid": "a"}), DataProtoItem(non_tensor_batch={})])
    with pytest.raises(ValueError, match="item 1 has no tensor batch but others do"):
        collate_fn([dp[0], DataProtoItem()])


# ------------------------------------------------------------------------------------------------------ future


def test_future_chunk_composes_dispatch_and_pickles():
    data = make_dp(6)
    future = DataProtoFuture.concat([])
    assert future.dispatch_fn is None
    assert_dp_equal(future.collect_fn([data[:2], data[2:]]), data)
    parts = future.chunk(3)
    assert len(parts) == 3
    assert prompts_first_col(parts[1].dispatch_fn(data)) == [2, 3]
    nested = parts[1].chunk(2)  # chunk of a chunk: dispatch applies the outer chunk first
    assert prompts_first_col(nested[1].dispatch_fn(data)) == [3]
    restored = pickle.loads(pickle.dumps(nested[1]))  # sent to workers as an argument
    assert prompts_first_col(restored.dispatch_fn(data)) == [3]
    # a future is dispatched before its length is known, so it is never padded: parts may differ by one row
    assert [len(part.dispatch_fn(make_dp(5))) for part in future.chunk(2)] == [3, 2]
    with pytest.raises(ValueError, match="chunks must be a positive int"):
        future.chunk(0)
