"""CPU snapshots of a module's weights: taken, overwritten by training, restored in place exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from verl.workers.fsdp.cpu_snapshot import restore_from_cpu, snapshot_to_cpu


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))


def test_restore_brings_back_the_snapshot_in_place():
    model = _model()
    weight = model[0].weight
    saved = snapshot_to_cpu(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(3, 4)).square().sum().backward()
    optimizer.step()
    assert not torch.equal(model[0].weight, before["0.weight"])  # training moved it
    restore_from_cpu(model, saved)
    assert model[0].weight is weight  # the same parameter object, written in place
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_snapshot_is_a_copy_and_a_foreign_one_is_refused():
    model = _model()
    saved = snapshot_to_cpu(model)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert not torch.equal(saved["0.weight"], model[0].weight)
    with pytest.raises(ValueError, match="missing"):
        restore_from_cpu(nn.Linear(4, 8), saved)
    wrong = dict(saved, **{"0.weight": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match="shape"):
        restore_from_cpu(model, wrong)
