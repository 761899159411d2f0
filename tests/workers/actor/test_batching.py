"""Mini/micro-batch plans and the guarded optimizer step, without a model."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.workers.actor.batching import (
    iter_mini_batches,
    length_order,
    micro_loss_scale,
    positive_int,
    read_meta,
    restore_order,
    select_batch,
    split_micro_batches,
)
from verl.workers.actor.optim_step import clip_and_step, resolve_grad_clip


def test_mini_batches_visit_every_sample_once_per_epoch():
    batch = TensorDict({"x": torch.arange(8)}, batch_size=[8])
    parts = list(iter_mini_batches(batch, 3, 2, True, torch.Generator().manual_seed(1)))
    assert [len(p) for p in parts] == [3, 3, 2, 3, 3, 2]
    first, second = torch.cat([p["x"] for p in parts[:3]]), torch.cat([p["x"] for p in parts[3:]])
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(8))
    assert first.tolist() != second.tolist()  # a fresh order each epoch
    ordered = list(iter_mini_batches(batch, 4, 1, False, torch.Generator()))
    assert [p["x"].tolist() for p in ordered] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_dynamic_micro_batches_respect_the_budget_and_restore_order():
    mask = torch.zeros(6, 10, dtype=torch.long)
    for i, n in enumerate([10, 2, 7, 3, 9, 1]):
        mask[i, :n] = 1
    batch = TensorDict({"attention_mask": mask, "row": torch.arange(6)}, batch_size=[6])
    micro, idx = split_micro_batches(batch, micro_batch_size=None, use_dynamic_bsz=True, max_token_len=12)
    assert all(int(m["attention_mask"].sum()) <= 12 for m in micro)
    assert restore_order([m["row"] for m in micro], idx).tolist() == list(range(6))
    fixed, none_idx = split_micro_batches(batch, micro_batch_size=4, use_dynamic_bsz=False, max_token_len=None)
    assert [len(m) for m in fixed] == [4, 2] and none_idx is None


def test_length_grouped_micro_batches_hold_rows_of_similar_length_and_restore_order():
    # 2 prompt columns and 6 response columns; responses of 6, 1, 5, 1, 2, 6 tokens, prompts of 1 or 2
    prompt = torch.tensor([[1, 1], [0, 1], [1, 1], [1, 1], [0, 1], [0, 1]])
    response = torch.zeros(6, 6, dtype=torch.long)
    for i, n in enumerate([6, 1, 5, 1, 2, 6]):
        response[i, :n] = 1
    batch = TensorDict(
        {"attention_mask": torch.cat([prompt, response], 1), "responses": response, "row": torch.arange(6)},
        batch_size=[6],
    )
    assert length_order(batch).tolist() == [1, 3, 4, 2, 5, 0]  # by response length, then prompt length
    micro, idx = split_micro_batches(
        batch, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=None, group_by_length=True
    )
    assert idx == [[1, 3], [4, 2], [5, 0]] and [m["row"].tolist() for m in micro] == idx
    assert restore_order([m["row"] for m in micro], idx).tolist() == list(range(6))
    # padded response columns (rows x longest answer of the micro-batch): 2+10+12 in length order, 12+10+12 in order
    assert sum(len(m) * int(m["responses"].sum(-1).max()) for m in micro) == 24
    kept, order_kept = split_micro_batches(batch, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=None)
    assert order_kept is None and sum(len(m) * int(m["responses"].sum(-1).max()) for m in kept) == 34
    whole, whole_idx = split_micro_batches(
        batch, micro_batch_size=6, use_dynamic_bsz=False, max_token_len=None, group_by_length=True
    )
    assert whole_idx is None and whole[0]["row"].tolist() == list(range(6))  # one micro-batch: nothing to reorder


def test_micro_loss_scale_weights_by_tokens_or_sequences():
    mini = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]])
    micro = mini[:2]
    assert micro_loss_scale(micro, mini, "token-mean") == pytest.approx(4 / 6)
    assert micro_loss_scale(micro, mini, "seq-mean-token-mean") == pytest.approx(2 / 3)  # the empty row is skipped
    empty = torch.zeros(2, 3)
    assert micro_loss_scale(empty[:1], empty, "token-mean") == pytest.approx(0.5)


def test_meta_and_size_errors_name_the_key():
    data = DataProto.from_dict(tensors={"a": torch.zeros(2, 1)}, meta_info={"temperature": 1.0})
    assert read_meta(data, "temperature", "here") == 1.0
    assert read_meta(data, "micro_batch_size", "here", 3) == 3
    with pytest.raises(KeyError, match=r"here needs meta_info\['max_token_len'\]"):
        read_meta(data, "max_token_len", "here")
    with pytest.raises(KeyError, match=r"here needs batch keys \['b'\]"):
        select_batch(data, ["a", "b"], "here")
    for bad in (0, -1, 1.5, None, True):
        with pytest.raises(ValueError, match="actor.ppo_epochs must be a positive integer"):
            positive_int(bad, "actor.ppo_epochs")
    assert positive_int(2.0, "x") == 2


def test_grad_clip_resolution():
    assert resolve_grad_clip(None, "actor.grad_clip") == math.inf
    assert resolve_grad_clip(0.5, "actor.grad_clip") == 0.5
    with pytest.raises(ValueError, match="critic.grad_clip must be positive"):
        resolve_grad_clip(0.0, "critic.grad_clip")


def test_clip_and_step_skips_non_finite_gradients():
    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=1.0)
    before = [p.detach().clone() for p in layer.parameters()]
    (layer(torch.tensor([[float("inf"), 1.0]])).sum()).backward()
    norm, stepped = clip_and_step(layer, optimizer, 1.0, who="test")
    assert not stepped and not math.isfinite(norm)
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    assert all(p.grad is None for p in layer.parameters())
    (layer(torch.tensor([[3.0, 4.0]])).sum()).backward()
    norm, stepped = clip_and_step(layer, optimizer, 1.0, who="test")
    assert stepped and norm == pytest.approx(math.sqrt(3**2 + 4**2 + 1))
    assert not all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
