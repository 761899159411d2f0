"""verl.utils.tensordict_utils: plain TensorDict batches with tensors, jagged tensors, row objects and
batch-wide values."""

import pickle

import pytest
import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.nested_tensors import nested_tensor_from_tensor_list, ragged_idx


def jagged(*lengths: int, start: int = 0) -> torch.Tensor:
    rows, value = [], start
    for length in lengths:
        rows.append(torch.arange(value, value + length))
        value += length
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def make_batch() -> TensorDict:
    return tu.get_tensordict(
        {"obs": torch.arange(4), "ids": jagged(1, 2, 3, 4), "uid": ["a", "b", "c", "d"]},
        non_tensor_dict={"temperature": 0.7},
    )


def test_get_tensordict_holds_three_kinds_and_get_unwraps_each():
    td = make_batch()
    assert td.batch_size == torch.Size([4])
    assert torch.equal(tu.get(td, "obs"), torch.arange(4))
    assert tu.get(td, "uid") == ["a", "b", "c", "d"]
    assert tu.get(td, "temperature") == 0.7 and tu.is_batch_wide(td.get("temperature"))
    assert tu.get(td, "missing", default="d") == "d"
    assert tu.get_tensordict({}, {"step": 1}).batch_size == torch.Size([])


def test_get_tensordict_errors_name_the_key():
    with pytest.raises(ValueError, match="per-row entry 'b' has 2 rows but 'a' has 3"):
        tu.get_tensordict({"a": torch.zeros(3), "b": ["x", "y"]})
    with pytest.raises(AssertionError, match="'k' is given both as a per-row entry and as a batch-wide value"):
        tu.get_tensordict({"k": torch.zeros(2)}, {"k": 1})
    with pytest.raises(TypeError, match=r"'imgs'\[1\] is a torch.Tensor"):
        tu.get_tensordict({"imgs": [1, torch.zeros(2)]})
    with pytest.raises(TypeError, match="per-row entry 'cfg' must be a torch.Tensor, list"):
        tu.get_tensordict({"cfg": {"a": 1}})
    strided = torch.nested.as_nested_tensor([torch.zeros(2), torch.zeros(3)])
    with pytest.raises(ValueError, match="nested tensor 'ids' must be jagged"):
        tu.get_tensordict({"ids": strided})


def test_batch_wide_values_keep_the_first_part_on_concat_even_through_torch_cat():
    parts = [tu.get_tensordict({"x": torch.arange(2) + 2 * i}, {"name": f"part{i}"}) for i in range(3)]
    assert tu.get(torch.cat(parts, dim=0), "name") == "part0"
    merged = tu.concat_tensordict(parts)
    assert tu.get(merged, "name") == "part0" and torch.equal(merged["x"], torch.arange(6))
    assert [tu.get(p, "name") for p in parts] == ["part0", "part1", "part2"]  # inputs untouched


def test_concat_tensordict_joins_jagged_rows_and_checks_keys():
    a = tu.get_tensordict({"ids": jagged(2, 1), "uid": ["a", "b"]}, {"t": 1})
    b = tu.get_tensordict({"ids": jagged(3, start=10), "uid": ["c"]}, {"t": 2})
    out = tu.concat_tensordict([a, b])
    assert out.batch_size == torch.Size([3]) and list(out.keys()) == ["ids", "uid", "t"]
    assert [row.tolist() for row in out["ids"].unbind(0)] == [[0, 1], [2], [10, 11, 12]]
    assert tu.get(out, "uid") == ["a", "b", "c"]
    with pytest.raises(ValueError, match="key 'uid' is not in every part"):
        tu.concat_tensordict([a, tu.get_tensordict({"ids": jagged(1)}, {"t": 1})])
    metas = [tu.get_tensordict({}, {"t": i}) for i in range(2)]
    assert tu.concat_tensordict(metas) is metas[0]


def test_chunk_tensordict_keeps_ragged_dim_and_needs_equal_parts():
    position_ids = nested_tensor_from_tensor_list([torch.arange(n).expand(4, n) for n in (2, 3, 4, 5)])
    td = tu.get_tensordict({"position_ids": position_ids, "uid": list("abcd")}, {"k": "v"})
    first, second = tu.chunk_tensordict(td, 2)
    assert ragged_idx(second["position_ids"]) == 2
    assert [row.shape[1] for row in second["position_ids"].unbind(0)] == [4, 5]
    assert tu.get(second, "uid") == ["c", "d"] and tu.get(second, "k") == "v"
    with pytest.raises(AssertionError, match="cannot chunk a tensordict of 4 rows into 3 chunks"):
        tu.chunk_tensordict(td, 3)


def test_index_select_accepts_masks_and_keeps_batch_wide_values():
    td = make_batch()
    picked = tu.index_select_tensor_dict(td, torch.tensor([False, True, False, True]))
    assert picked.batch_size == torch.Size([2])
    assert picked["obs"].tolist() == [1, 3] and tu.get(picked, "uid") == ["b", "d"]
    assert [row.tolist() for row in picked["ids"].unbind(0)] == [[1, 2], [6, 7, 8, 9]]
    assert tu.get(picked, "temperature") == 0.7
    assert tu.index_select_tensor_dict(None, [0]) is None


def test_pad_to_divisor_wraps_around_and_unpad_restores():
    td = make_batch()[:3]
    padded, pad = tu.pad_to_divisor(td, 5)
    assert pad == 2 and padded["obs"].tolist() == [0, 1, 2, 0, 1]
    assert tu.get(padded, "uid") == ["a", "b", "c", "a", "b"]
    restored = tu.unpad(padded, pad)
    assert restored["obs"].tolist() == [0, 1, 2] and tu.get(restored, "temperature") == 0.7
    unchanged, no_pad = tu.pad_to_divisor(td, 3)
    assert unchanged is td and no_pad == 0
    with pytest.raises(ValueError, match=r"pad_size must be an int in \[0, 5\], got 6"):
        tu.unpad(padded, 6)


def test_union_adds_keys_in_place_and_a_clash_changes_nothing():
    left = tu.get_tensordict({"x": torch.arange(3)}, {"top_p": 0.9})
    right = tu.get_tensordict({"x": torch.arange(3), "y": torch.ones(3), "uid": list("abc")})
    assert tu.union_tensor_dict(left, right) is left
    assert set(left.keys()) == {"x", "y", "uid", "top_p"}
    clash = tu.get_tensordict({"z": torch.zeros(3)}, {"top_p": 0.5})
    with pytest.raises(AssertionError, match="`top_p` in tensor_dict1 and tensor_dict2 are not the same object"):
        tu.union_tensor_dict(left, clash)
    assert "z" not in left.keys()
    with pytest.raises(ValueError, match="cannot union tensordicts of batch size"):
        tu.union_tensor_dict(left, tu.get_tensordict({"x": torch.arange(2)}))


def test_pop_keys_is_atomic_and_get_keys_shares_entries():
    td = make_batch()
    with pytest.raises(KeyError, match="key 'nope' not in tensordict"):
        tu.pop_keys(td, ["obs", "nope"])
    assert "obs" in td.keys()
    subset = tu.get_keys(td, ["obs", "temperature"])
    assert set(subset.keys()) == {"obs", "temperature"} and subset.batch_size == td.batch_size
    popped = tu.pop_keys(td, ["uid", "temperature"])
    assert tu.get(popped, "uid") == list("abcd") and set(td.keys()) == {"obs", "ids"}
    assert tu.pop(td, "obs").tolist() == [0, 1, 2, 3] and tu.pop(td, "obs", default=5) == 5


def test_assign_helpers_wrap_by_kind_and_check_row_counts():
    td = tu.get_tensordict({"x": torch.zeros(2)})
    tu.assign_non_tensor(td, rows=[[1], []], cfg={"a": 1})
    assert tu.get(td, "rows") == [[1], []] and tu.get(td, "cfg") == {"a": 1}
    assert tu.get_non_tensor_data(td, "cfg", None) == {"a": 1} and tu.unwrap_non_tensor_data(3) == 3
    with pytest.raises(RuntimeError, match="per-row entry 'bad' has 3 rows but the tensordict has 2"):
        tu.assign_non_tensor_stack(td, "bad", [1, 2, 3])
    with pytest.raises(TypeError, match="assign_non_tensor needs a TensorDict, got dict"):
        tu.assign_non_tensor({}, a=1)


def test_make_iterator_follows_dataloader_options_and_needs_divisible_rows():
    td = make_batch()
    ordered = [b["obs"].tolist() for b in tu.make_iterator(td, 2, epochs=2, dataloader_kwargs={"shuffle": False})]
    assert ordered == [[0, 1], [2, 3], [0, 1], [2, 3]]
    shuffled = [b["obs"].tolist() for b in tu.make_iterator(td, 2, 1, seed=3, dataloader_kwargs={"shuffle": True})]
    again = [b["obs"].tolist() for b in tu.make_iterator(td, 2, 1, seed=3, dataloader_kwargs={"shuffle": True})]
    assert shuffled == again and sorted(sum(shuffled, [])) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="4 rows do not split into mini-batches of 3"):
        tu.make_iterator(td, 3, 1)


def test_assert_tensordict_eq_names_the_differing_key():
    td = make_batch()
    tu.assert_tensordict_eq(td, make_batch())
    other = make_batch()
    other.set("ids", jagged(1, 2, 3, 5))
    with pytest.raises(AssertionError, match="'ids' differs in row 3"):
        tu.assert_tensordict_eq(td, other)
    with pytest.raises(AssertionError, match=r"key sets differ: \['extra'\]"):
        tu.assert_tensordict_eq(td, tu.assign_non_tensor(make_batch(), extra=1))


def test_contiguous_makes_a_consolidatable_copy_that_survives_pickling():
    td = tu.get_tensordict({"a": torch.randn(3, 4)[:, :-1], "ids": jagged(1, 2, 3), "o": [{"p": 1}] * 3}, {"m": 2})
    packed = tu.contiguous(td)
    assert packed is not td and packed["a"].is_contiguous()
    tu.assert_tensordict_eq(packed, td)
    restored = pickle.loads(pickle.dumps(packed.consolidate()))
    tu.assert_tensordict_eq(restored, td)


def test_list_of_dict_to_tensordict_stacks_or_nests_by_shape():
    rows = [{"x": torch.ones(2), "ids": torch.arange(n), "tag": f"t{n}"} for n in (1, 3)]
    td = tu.list_of_dict_to_tensordict(rows)
    assert td["x"].shape == (2, 2) and td["ids"].is_nested and tu.get(td, "tag") == ["t1", "t3"]
    with pytest.raises(KeyError, match="row 1 lacks key 'x'"):
        tu.list_of_dict_to_tensordict([{"x": 1}, {"y": 2}])


def test_maybe_fix_3d_position_ids_restores_ragged_dim_2():
    rows = [torch.arange(n).expand(4, n) for n in (2, 3)]
    td = tu.get_tensordict({"position_ids": nested_tensor_from_tensor_list(rows)})
    td["position_ids"]._ragged_idx = 1  # what a consolidate + pickle round trip has been seen to leave behind
    tu.maybe_fix_3d_position_ids(td)
    assert ragged_idx(td["position_ids"]) == 2
    assert [r.shape for r in td["position_ids"].unbind(0)] == [torch.Size([4, 2]), torch.Size([4, 3])]
    tu.maybe_fix_3d_position_ids(TensorDict({}, batch_size=[2]))  # nothing to fix
