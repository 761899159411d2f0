"""verl.utils.groupwise: group labels to indices, per-group mean/std/count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.utils import as_torch_index, group_mean_std


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([3, 3, 5], [3, 3, 5]),  # integers stay as they are
        (np.array([1.0, 2.0000001, 1.0]), [1, 2, 1]),  # near-integer floats are rounded
        (["7", "7", "2"], [7, 7, 2]),  # numeric strings
        (["uid-b", "uid-a", "uid-b"], [1, 0, 1]),  # anything else: factorised in sorted order
        (np.array(["x", 1, "x"], dtype=object), [1, 0, 1]),
        (torch.tensor([True, False]), [1, 0]),
        (torch.tensor([0.5, 1.5, 0.5]), [0, 1, 0]),  # non-integral floats are factorised
    ],
)
def test_as_torch_index(labels, expected):
    index = as_torch_index(labels)
    assert index.dtype == torch.long and index.tolist() == expected


def test_group_mean_std_matches_a_loop_and_treats_singletons_neutrally():
    scores = torch.tensor([1.0, 3.0, 5.0, 10.0, 2.0])
    groups = torch.tensor([0, 0, 0, 1, 2])
    mean, std, count = group_mean_std(scores, groups)
    assert count.tolist() == [3.0, 1.0, 1.0]
    assert mean[0].item() == pytest.approx(3.0) and std[0].item() == pytest.approx(2.0)  # unbiased std
    assert mean[1:].tolist() == [0.0, 0.0] and std[1:].tolist() == [1.0, 1.0]


def test_group_mean_std_checks_inputs_and_empty():
    with pytest.raises(ValueError, match="3 scores but 2 group indices"):
        group_mean_std(torch.zeros(3), torch.zeros(2, dtype=torch.long))
    mean, std, count = group_mean_std(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert mean.numel() == std.numel() == count.numel() == 0
    _, std, _ = group_mean_std(torch.tensor([2.0, 2.0]), torch.tensor([0, 0]), eps=1e-4)
    assert std.item() == pytest.approx(1e-2)  # variance floored at eps
