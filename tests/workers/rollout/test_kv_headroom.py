"""The running batch's KV cache layer: in-place decode columns, amortised growth, row moves and admissions."""

from __future__ import annotations

import pytest
import torch

from verl.workers.rollout.hf.kv_batch import RunningBatch, cache_argument, compaction_order
from verl.workers.rollout.hf.kv_headroom import HeadroomLayer


def _states(rows: int, columns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, columns, 4, generator=gen), torch.randn(rows, 2, columns, 4, generator=gen)


def _layer(rows: int, columns: int, seed: int = 0) -> HeadroomLayer:
    layer = HeadroomLayer()
    layer.assign(*_states(rows, columns, seed))
    return layer


def test_decode_columns_are_written_in_place_and_growth_is_amortised():
    layer = _layer(3, 5)
    expected_keys, expected_values = layer.keys.clone(), layer.values.clone()
    buffers = set()
    for step in range(300):
        keys, values = _states(3, 1, seed=step + 1)
        out_keys, out_values = layer.update(keys, values)
        expected_keys = torch.cat([expected_keys, keys], dim=2)
        expected_values = torch.cat([expected_values, values], dim=2)
        buffers.add(layer._key_buffer.data_ptr())
    torch.testing.assert_close(out_keys, expected_keys, rtol=0, atol=0)
    torch.testing.assert_close(out_values, expected_values, rtol=0, atol=0)
    assert layer.get_seq_length() == 305
    assert len(buffers) <= 6, f"{len(buffers)} reallocations over 300 decode steps"


def test_keep_rows_in_any_order_and_drop_leading_columns():
    layer = _layer(4, 6)
    layer.update(*_states(4, 1, seed=7))  # the buffers now have spare columns
    before_keys, before_values = layer.keys.clone(), layer.values.clone()
    for rows, drop in (([0, 2, 3], 2), ([2, 0], 1)):
        layer.keep_rows(rows, drop)
        index = torch.tensor(rows)
        before_keys, before_values = before_keys[index, :, drop:], before_values[index, :, drop:]
        torch.testing.assert_close(layer.keys, before_keys, rtol=0, atol=0)
        torch.testing.assert_close(layer.values, before_values, rtol=0, atol=0)
    keys, values = _states(2, 1, seed=9)
    layer.update(keys, values)
    torch.testing.assert_close(layer.keys, torch.cat([before_keys, keys], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(layer.values, torch.cat([before_values, values], dim=2), rtol=0, atol=0)


@pytest.mark.parametrize("old_columns, new_columns", [(3, 7), (8, 2), (5, 5)])
def test_append_rows_right_aligns_both_sides_with_zero_padding(old_columns, new_columns):
    layer = _layer(2, old_columns)
    layer.update(*_states(2, 1, seed=3))
    old_keys, old_values = layer.keys.clone(), layer.values.clone()
    new_keys, new_values = _states(3, new_columns, seed=4)
    layer.append_rows(new_keys, new_values)

    length = max(old_keys.shape[2], new_columns)

    def padded(t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t.new_zeros(t.shape[0], t.shape[1], length - t.shape[2], t.shape[3]), t], dim=2)

    torch.testing.assert_close(layer.keys, torch.cat([padded(old_keys), padded(new_keys)]), rtol=0, atol=0)
    torch.testing.assert_close(layer.values, torch.cat([padded(old_values), padded(new_values)]), rtol=0, atol=0)
    assert layer.capacity > length  # the next decode step has room


def test_update_with_another_row_count_is_refused():
    layer = _layer(3, 4)
    with pytest.raises(ValueError, match="2 rows of new states for a cache of 3 rows"):
        layer.update(*_states(2, 1, seed=1))


@pytest.mark.parametrize(
    "alive",
    [
        [True, False, True, True, False, True, True],
        [False, False, True, True],
        [True, True, False],
        [False, True],
        [True, True, True],
        [False, False],
    ],
)
def test_compaction_moves_only_as_many_rows_as_finished(alive):
    order = compaction_order(alive)
    live = [i for i, flag in enumerate(alive) if flag]
    assert sorted(order) == live
    moved = [slot for slot, row in enumerate(order) if row != slot]
    assert len(moved) == sum(1 for flag in alive[: len(live)] if not flag)
    # a live row already inside the new size never moves
    assert all(order[i] == i for i in live if i < len(live))


def test_keep_rows_fills_a_finished_slot_from_the_end():
    layer = _layer(5, 3)
    before_keys = layer.keys.clone()
    layer._key_buffer[1].fill_(float("nan"))  # a finished row's slot: its old contents must not survive
    order = compaction_order([True, False, True, True, True])
    layer.keep_rows(order)
    assert order == [0, 4, 2, 3]
    torch.testing.assert_close(layer.keys, before_keys[torch.tensor(order)], rtol=0, atol=0)


def test_running_batch_decodes_without_reallocating_and_matches_a_full_forward(tiny_causal_lm):
    batch = RunningBatch(tiny_causal_lm, torch.device("cpu"))
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    with torch.inference_mode():
        batch.admit(prompts)
        tokens = [list(p) for p in prompts]
        buffers = set()
        for step in range(12):
            if step == 4:  # a request joins mid-run and one leaves
                batch.admit([[20, 21, 22, 23, 24, 25, 26]])
                tokens.append([20, 21, 22, 23, 24, 25, 26])
            if step == 8:  # the first row leaves: the last takes its slot
                order = batch.retire([False, True, True])
                assert order == [2, 1]
                tokens = [tokens[i] for i in order]
            next_tokens = torch.arange(batch.size) + 40 + step
            batch.set_last_tokens(slice(None), next_tokens)
            for row, token in zip(tokens, next_tokens.tolist()):
                row.append(token)
            logits = batch.decode()
            if step != 0:  # the first step moves the prefill into buffers with spare columns
                buffers.add(batch.cache.layers[0]._key_buffer.data_ptr())
        for row, seq in enumerate(tokens):
            full = tiny_causal_lm(input_ids=torch.tensor([seq])).logits[0, -1]
            torch.testing.assert_close(logits[row], full, rtol=1e-4, atol=1e-4)
    assert len(buffers) == 2, "the cache should be rebuilt by the admission only"


def test_cache_is_passed_under_the_name_the_model_forward_takes():
    class NewStyle(torch.nn.Module):
        def forward(self, input_ids, cache=None, **kwargs):
            return cache

    class OldStyle(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, **kwargs):
            return past_key_values

    assert cache_argument(NewStyle()) == "cache"
    assert cache_argument(OldStyle()) == "past_key_values"


def test_dynamic_layer_editing_methods_stay_consistent_with_the_buffers():
    layer = _layer(3, 4)
    layer.update(*_states(3, 1, seed=5))  # spare columns from here on
    keys, values = layer.keys.clone(), layer.values.clone()

    layer.crop(-2)
    torch.testing.assert_close(layer.keys, keys[:, :, :-2], rtol=0, atol=0)
    new_keys, new_values = _states(3, 1, seed=6)
    layer.update(new_keys, new_values)  # overwrites the cropped columns
    keys = torch.cat([keys[:, :, :-2], new_keys], dim=2)
    values = torch.cat([values[:, :, :-2], new_values], dim=2)
    torch.testing.assert_close(layer.values, values, rtol=0, atol=0)

    layer.batch_select_indices(torch.tensor([2, 0]))
    torch.testing.assert_close(layer.keys, keys[[2, 0]], rtol=0, atol=0)

    layer.batch_repeat_interleave(2)
    torch.testing.assert_close(layer.keys, keys[[2, 0]].repeat_interleave(2, dim=0), rtol=0, atol=0)
    assert layer.get_seq_length() == keys.shape[2]

    layer.reset()
    assert layer.get_seq_length() == 0
    fresh_keys, fresh_values = _states(2, 3, seed=8)
    layer.update(fresh_keys, fresh_values)
    torch.testing.assert_close(layer.keys, fresh_keys, rtol=0, atol=0)
    with pytest.raises(ValueError, match="negative count"):
        layer.crop(3)
