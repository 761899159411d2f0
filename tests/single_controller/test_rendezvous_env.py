"""Rank 0 of a worker group picks its own MASTER_ADDR/MASTER_PORT even when its process inherited them: a driver
started under torchrun, or one that opened a process group before ray.init, passes them to every Ray worker, and
each group would then bind the same port."""

from __future__ import annotations

import os

import pytest

from verl.single_controller.ray import worker_process

pytestmark = pytest.mark.ray


def test_rank0_replaces_an_inherited_master_address_and_publishes_its_own(ray_cluster, monkeypatch):
    key = "rendezvous/test_inherited_env"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(worker_process.RENDEZVOUS_ENV, key)
    monkeypatch.setenv("MASTER_ADDR", "10.255.255.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    monkeypatch.setitem(worker_process._setup_done, "value", False)
    try:
        worker_process.setup_worker_process()
        published = worker_process.read_rendezvous(key)
    finally:
        worker_process.clear_rendezvous(key)
    assert published == (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    assert published != ("10.255.255.1", "29999")
    assert 0 < int(published[1]) < 65536
