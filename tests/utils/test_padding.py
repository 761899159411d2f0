import pytest
import torch

from verl.utils.padding import index_first_axis, pad_input, unpad_input


def _mask():
    # left-padded, right-padded, full and single-token rows
    return torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])


def test_unpad_input_matches_loop_reference():
    torch.manual_seed(0)
    mask = _mask()
    hidden = torch.randn(4, 5, 3)
    unpadded, indices, cu_seqlens, max_seqlen = unpad_input(hidden, mask)

    expected_rows, expected_idx, lengths = [], [], []
    for b in range(4):
        kept = [s for s in range(5) if mask[b, s]]
        lengths.append(len(kept))
        for s in kept:
            expected_rows.append(hidden[b, s])
            expected_idx.append(b * 5 + s)
    assert torch.equal(unpadded, torch.stack(expected_rows))
    assert indices.tolist() == expected_idx
    assert cu_seqlens.dtype == torch.int32
    assert cu_seqlens.tolist() == [0, 3, 6, 11, 12]
    assert max_seqlen == max(lengths) == 5


def test_unpad_input_token_ids_and_round_trip():
    mask = _mask()
    ids = torch.arange(20).reshape(4, 5)
    flat_ids, indices, _, _ = unpad_input(ids.unsqueeze(-1), mask)
    assert flat_ids.shape == (12, 1)
    assert flat_ids.squeeze(-1).tolist() == [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 19]
    restored = pad_input(flat_ids, indices, 4, 5).squeeze(-1)
    assert torch.equal(restored, ids * mask)


def test_pad_input_gradient_flows_only_to_real_tokens():
    torch.manual_seed(1)
    mask = _mask()
    hidden = torch.randn(4, 5, 2, requires_grad=True)
    unpadded, indices, _, _ = unpad_input(hidden, mask)
    repadded = pad_input(unpadded * 2.0, indices, 4, 5)
    repadded.sum().backward()
    expected = 2.0 * mask.unsqueeze(-1).expand(4, 5, 2).float()
    assert torch.equal(hidden.grad, expected)
    assert torch.equal(repadded.detach(), 2.0 * hidden.detach() * mask.unsqueeze(-1))


def test_index_first_axis():
    x = torch.arange(12.0).reshape(6, 2).requires_grad_(True)
    out = index_first_axis(x, torch.tensor([4, 1]))
    assert out.tolist() == [[8.0, 9.0], [2.0, 3.0]]
    out.sum().backward()
    assert x.grad[:, 0].tolist() == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="indices must be 1-D"):
        index_first_axis(x, torch.tensor([[0]]))


def test_empty_mask_row_and_all_padding():
    mask = torch.tensor([[0, 0], [1, 0]])
    unpadded, indices, cu, max_len = unpad_input(torch.ones(2, 2, 4), mask)
    assert unpadded.shape == (1, 4) and indices.tolist() == [2] and cu.tolist() == [0, 0, 1] and max_len == 1


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match=r"leading dims \(2, 3\) must match attention_mask shape \(2, 4\)"):
        unpad_input(torch.zeros(2, 3, 1), torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"attention_mask must be \[batch, seqlen\]"):
        unpad_input(torch.zeros(2, 3), torch.ones(6))
    with pytest.raises(ValueError, match=r"indices shape \(3,\) must be \[T\]"):
        pad_input(torch.zeros(2, 1), torch.tensor([0, 1, 2]), 1, 3)
    with pytest.raises(ValueError, match="index 7 is out of range for batch=2 x seqlen=3"):
        pad_input(torch.zeros(2, 1), torch.tensor([0, 7]), 2, 3)
