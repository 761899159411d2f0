"""verl.utils.device (CUDA or CPU), verl.utils.memory_utils (no-ops without CUDA) and verl.utils.distributed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from verl.utils import device, memory_utils


def test_device_names_follow_cuda_availability():
    cuda = torch.cuda.is_available()
    assert device.get_device_name() == ("cuda" if cuda else "cpu")
    assert device.get_nccl_backend() == ("nccl" if cuda else "gloo")
    assert device.get_visible_devices_keyword() == "CUDA_VISIBLE_DEVICES"
    assert device.get_resource_name() == "GPU"
    assert device.is_npu_available is False and device.is_torch_npu_available() is False
    assert device.is_device_available() is cuda


@pytest.mark.parametrize(
    ("configured", "expected"), [("npu", "cuda"), ("cpu", "cpu"), ("cuda", "cuda"), ("auto", "auto")]
)
def test_auto_set_device_on_a_cuda_machine(monkeypatch, configured, expected):
    monkeypatch.setattr(device, "get_device_name", lambda: "cuda")
    config = SimpleNamespace(trainer=SimpleNamespace(device=configured))
    device.auto_set_device(config)
    assert config.trainer.device == expected


def test_auto_set_device_changes_nothing_without_an_accelerator(monkeypatch):
    monkeypatch.setattr(device, "get_device_name", lambda: "cpu")
    config = SimpleNamespace(trainer=SimpleNamespace(device="npu"))
    device.auto_set_device(config)
    assert config.trainer.device == "npu"
    device.auto_set_device(None)  # no trainer section: nothing to do
    device.auto_set_device(SimpleNamespace())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_cpu_only_helpers_are_noops():
    device.set_expandable_segments(True)
    assert device.get_device_capability() == (None, None)
    assert memory_utils.get_memory_info() == {}
    memory_utils.aggressive_empty_cache(force_sync=True)
    memory_utils.reset_memory_stats()
    memory_utils.log_memory_usage("test")


def test_manual_seed_seeds_the_generator_in_use():
    device.manual_seed_all(7)
    first = torch.rand(2, device=device.get_device_name())
    device.manual_seed(7)
    assert torch.equal(torch.rand(2, device=device.get_device_name()), first)


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DIST_INIT_METHOD")
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_ray_style_group_of_one_needs_no_rendezvous_env():
    done = _run(
        """
        import torch.distributed as dist
        from verl.utils.distributed import destroy_global_process_group, initialize_global_process_group_ray
        initialize_global_process_group_ray(timeout_second=60)
        initialize_global_process_group_ray()  # idempotent
        print(dist.get_world_size(), dist.get_rank(), dist.get_backend())
        destroy_global_process_group()
        print(dist.is_initialized())
    """,
        {},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0", "gloo" if not torch.cuda.is_available() else "cpu:gloo,cuda:nccl", "False"]


def test_torchrun_style_group_reads_and_names_its_environment():
    done = _run(
        """
        from verl.utils.distributed import initialize_global_process_group
        print(initialize_global_process_group(timeout_second=60))
    """,
        {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(0, 0, 1)"
    missing = _run(
        """
        from verl.utils.distributed import initialize_global_process_group
        initialize_global_process_group()
    """,
        {"RANK": "0", "WORLD_SIZE": "1"},
    )
    assert missing.returncode != 0 and "LOCAL_RANK is not set" in missing.stderr


def test_numa_affinity_is_left_alone_without_cuda(monkeypatch):
    from verl.utils import distributed

    monkeypatch.setattr(distributed, "get_device_name", lambda: "cpu")
    before = os.sched_getaffinity(0)
    distributed.set_numa_affinity()
    assert os.sched_getaffinity(0) == before
