"""verl.utils.nested_tensors: row access on jagged tensors whatever their ragged dimension."""

import pytest
import torch

from verl.utils.nested_tensors import (
    concat_nested_tensors,
    nested_rows,
    nested_tensor_from_tensor_list,
    ragged_idx,
    select_nested_rows,
)


def test_default_ragged_dim_is_the_last_dim_of_a_row():
    tokens = nested_tensor_from_tensor_list([torch.arange(2), torch.arange(3)])
    assert ragged_idx(tokens) == 1 and tokens.offsets().tolist() == [0, 2, 5]
    mrope = nested_tensor_from_tensor_list([torch.zeros(4, 2), torch.zeros(4, 5)])
    assert ragged_idx(mrope) == 2 and mrope.values().shape == (4, 7)


def test_rows_of_a_non_last_ragged_dim_come_back_exactly():
    rows = [torch.randn(5, 8), torch.randn(2, 8), torch.randn(7, 8)]
    nested = nested_tensor_from_tensor_list(rows, ragged_idx=1)
    assert ragged_idx(nested) == 1
    assert all(torch.equal(a, b) for a, b in zip(nested_rows(nested), rows))
    picked = select_nested_rows(nested, [-1, 0])
    assert ragged_idx(picked) == 1 and [r.shape[0] for r in nested_rows(picked)] == [7, 5]
    assert torch.equal(nested_rows(select_nested_rows(nested, torch.tensor([False, True, False])))[0], rows[1])


def test_concat_keeps_the_ragged_dim_of_the_first_tensor():
    a = nested_tensor_from_tensor_list([torch.full((4, 2), 1), torch.full((4, 3), 2)])
    b = nested_tensor_from_tensor_list([torch.full((4, 1), 3)])
    out = concat_nested_tensors([a, b])
    assert ragged_idx(out) == 2 and [r[0, 0].item() for r in nested_rows(out)] == [1, 2, 3]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"ragged_idx must be in \[1, 2\] for rows of 2 dims, got 3"):
        nested_tensor_from_tensor_list([torch.zeros(2, 2)], ragged_idx=3)
    with pytest.raises(ValueError, match="row 1 has 1 dims but row 0 has 2"):
        nested_tensor_from_tensor_list([torch.zeros(2, 2), torch.zeros(2)])
    with pytest.raises(TypeError, match="tensor 1 is not nested"):
        concat_nested_tensors([nested_tensor_from_tensor_list([torch.zeros(2)]), torch.zeros(2)])
    with pytest.raises(ValueError, match="boolean mask has 1 entries but the nested tensor has 2 rows"):
        select_nested_rows(nested_tensor_from_tensor_list([torch.zeros(1), torch.zeros(2)]), [True])
