"""Folding rows into groups and back, and unfolding column chunks, on DataProtos."""

import numpy as np
import pytest
import torch

from verl.protocol import DataProto, fold_batch_dim, unfold_batch_dim


def grouped(n_groups: int = 3, size: int = 2) -> DataProto:
    rows = n_groups * size
    return DataProto.from_dict(
        tensors={"x": torch.arange(rows * 2).view(rows, 2)},
        non_tensors={"uid": [f"g{i // size}" for i in range(rows)]},
        meta_info={"step": 4},
    )


def test_fold_reorder_unfold_moves_whole_groups():
    data = grouped()
    folded = fold_batch_dim(data, new_batch_size=3)
    assert len(folded) == 3 and folded.batch["x"].shape == (3, 2, 2)
    assert folded.non_tensor_batch["uid"].shape == (3, 2)
    folded.reorder(torch.tensor([2, 0, 1]))
    back = unfold_batch_dim(folded, batch_dims=2)
    assert back.non_tensor_batch["uid"].tolist() == ["g2", "g2", "g0", "g0", "g1", "g1"]
    assert back.batch["x"][:, 0].tolist() == [8, 10, 0, 2, 4, 6]
    assert back.meta_info == {"step": 4} and back.meta_info is not data.meta_info
    assert data.non_tensor_batch["uid"].shape == (6,)  # the input is left alone


def test_fold_and_unfold_errors():
    with pytest.raises(AssertionError, match=r"cannot fold 6 rows into 4 rows"):
        fold_batch_dim(grouped(), 4)
    with pytest.raises(ValueError, match="new_batch_size must be a positive int"):
        fold_batch_dim(grouped(), 0)
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has 1 dims, fewer than 2"):
        unfold_batch_dim(DataProto.from_dict(non_tensors={"uid": ["a"]}), batch_dims=2)


def test_unfold_column_chunks_splits_named_keys_and_repeats_the_rest():
    data = DataProto.from_dict(
        tensors={"cols": torch.arange(12).view(3, 4), "keep": torch.arange(3)},
        non_tensors={"pairs": [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]], "uid": ["a", "b", "c"]},
        meta_info={"k": 1},
    )
    assert data.non_tensor_batch["pairs"].shape == (3,)  # one list object per row
    out = data.unfold_column_chunks(2, split_keys=["cols", "pairs"])
    assert out.batch["cols"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert out.batch["keep"].tolist() == [0, 0, 1, 1, 2, 2]
    assert out.non_tensor_batch["pairs"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]
    assert out.non_tensor_batch["uid"].tolist() == ["a", "a", "b", "b", "c", "c"]
    assert out.meta_info == {"k": 1}
    with pytest.raises(ValueError, match=r"cannot split 'cols' of shape \[3, 4\] into 3 column chunks"):
        data.unfold_column_chunks(3, split_keys=["cols"])
    with pytest.raises(KeyError, match="split key 'nope' is in neither"):
        data.unfold_column_chunks(2, split_keys=["nope"])
    ragged = DataProto(non_tensor_batch={"p": np.array([[1, 2], [3]], dtype=object)})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['p'\] rows have different lengths \[1, 2\]"):
        ragged.unfold_column_chunks(1, split_keys=["p"])
