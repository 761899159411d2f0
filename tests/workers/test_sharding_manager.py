"""Sharding managers: the identity for workers without sequence parallelism; the rest refused by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verl.utils.extras import MissingExtraError
from verl.workers.sharding_manager import BaseShardingManager, FSDPUlyssesShardingManager, FSDPVLLMShardingManager


class FakeMesh:
    def __init__(self, sp: int):
        self.mesh_dim_names = ("dp", "sp")
        self.sp = sp

    def __getitem__(self, name):
        return SimpleNamespace(size=lambda: self.sp)


@pytest.mark.parametrize("mesh", [None, FakeMesh(1)])
def test_ulysses_manager_without_sequence_parallelism_is_the_identity(mesh):
    manager = FSDPUlyssesShardingManager(mesh)
    data = object()
    with manager as entered:
        assert entered is manager
        assert manager.postprocess_data(manager.preprocess_data(data)) is data
    assert isinstance(manager, BaseShardingManager) and manager.timing == {}


def test_sequence_parallel_mesh_and_vllm_manager_are_refused():
    with pytest.raises(NotImplementedError, match="size 2"):
        FSDPUlyssesShardingManager(FakeMesh(2))
    with pytest.raises(MissingExtraError, match="vllm"):
        FSDPVLLMShardingManager(None, None, None)
