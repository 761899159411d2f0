"""verl.utils.ulysses at sequence-parallel size 1 (identity-like, pad size 0) and its refusal of larger sizes.
Real one- and two-rank groups are exercised in test_fsdp_utils_distributed.py."""

from __future__ import annotations

import pytest
import torch

from verl.utils import ulysses


def test_no_group_means_size_one_rank_zero():
    assert ulysses.get_ulysses_sequence_parallel_group() is None
    assert ulysses.get_ulysses_sequence_parallel_world_size() == 1
    assert ulysses.get_ulysses_sequence_parallel_rank() == 0


def test_pad_and_slice_are_identity_at_size_one():
    ids = torch.arange(7).reshape(1, 7)
    pos = torch.arange(7).reshape(1, 7)
    padded_ids, padded_pos, pad = ulysses.ulysses_pad(ids, pos, sp_size=1)
    assert pad == 0 and padded_ids is ids and padded_pos is pos
    sliced_ids, sliced_pos, pad = ulysses.ulysses_pad_and_slice_inputs(ids, pos, sp_size=1)
    assert pad == 0 and torch.equal(sliced_ids, ids) and torch.equal(sliced_pos, pos)
    _, kept_pos, _ = ulysses.ulysses_pad_and_slice_inputs(ids, pos, skip_position_ids_rmpad=True)
    assert kept_pos is pos


def test_collectives_return_their_input_without_a_group():
    x = torch.randn(2, 6, 4, 8)
    assert ulysses.gather_seq_scatter_heads(x, seq_dim=1, head_dim=2) is x
    assert ulysses.gather_heads_scatter_seq(x, head_dim=2, seq_dim=1) is x
    assert torch.equal(ulysses.slice_input_tensor(x, dim=1), x)
    assert torch.equal(ulysses.all_to_all_tensor(x, 2, 1), x)
    assert torch.equal(ulysses.all_to_all_tensor(x, 2, 1, async_op=True)(), x)
    assert torch.equal(ulysses.all_gather_tensor(x), x)
    # without a group nothing was padded, so nothing is unpadded (verl's contract)
    assert ulysses.gather_outputs_and_unpad(x, gather_dim=1, unpad_dim=1, padding_size=2) is x


def test_misspelt_old_name_still_works_with_a_warning():
    x = torch.ones(3)
    with pytest.warns(FutureWarning, match="gather_outputs_and_unpad"):
        assert ulysses.gather_outpus_and_unpad(x, gather_dim=0) is x


@pytest.mark.parametrize(
    "call",
    [
        lambda: ulysses.ulysses_pad(torch.ones(1, 5, dtype=torch.long), sp_size=2),
        lambda: ulysses.ulysses_pad_and_slice_inputs(torch.ones(1, 5, dtype=torch.long), sp_size=4),
        lambda: ulysses.validate_ulysses_config(num_heads=8, ulysses_sequence_size=2),
    ],
)
def test_larger_sizes_are_refused(call):
    with pytest.raises(ulysses.SequenceParallelNotSupportedError, match="not implemented in this build"):
        call()


def test_validate_accepts_size_one_and_packed_shapes_are_checked():
    ulysses.validate_ulysses_config(num_heads=7, ulysses_sequence_size=1)
    with pytest.raises(ValueError, match="position_ids_rmpad has 4 tokens"):
        ulysses.ulysses_pad(torch.ones(1, 5, dtype=torch.long), torch.ones(1, 4, dtype=torch.long))


def test_sharding_managers_come_from_the_workers():
    from verl.workers.sharding_manager import BaseShardingManager, FSDPUlyssesShardingManager

    assert ulysses.BaseShardingManager is BaseShardingManager
    assert ulysses.FSDPUlyssesShardingManager is FSDPUlyssesShardingManager
