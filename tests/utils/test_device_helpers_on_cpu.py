"""The device helpers as GPU-written recipe code uses them, run on a CPU-only process (issue 40, item 4)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from verl import DataProto
from verl.utils import device
from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_torch_device
from verl.utils.distributed import default_backend, normalize_backend

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _group(backend: str) -> Iterator[None]:
    """A real one-process group on a free port, destroyed on exit."""
    dist.init_process_group(backend=backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_device_id_is_a_device_torch_and_dataproto_accept():
    assert get_device_name() == "cpu" and get_device_id() == "cpu"
    x = torch.arange(3)
    assert x.to(get_device_id()).device.type == "cpu"
    assert torch.device(get_device_id()) == torch.device("cpu")
    assert torch.zeros(2, device=get_device_id()).device.type == "cpu"
    data = DataProto.from_dict({"a": torch.ones(2, 3)}).to(get_device_id())
    assert data.batch["a"].device.type == "cpu"


def test_names_a_recipe_reads_on_cpu():
    assert device.is_cuda_available is False and device.is_npu_available is False
    assert device.get_resource_name() == "GPU"
    assert device.get_visible_devices_keyword() == "CUDA_VISIBLE_DEVICES"
    for configured in ("cpu", "auto"):
        config = SimpleNamespace(trainer=SimpleNamespace(device=configured))
        device.auto_set_device(config)
        assert config.trainer.device == configured


@pytest.mark.parametrize(
    "backend",
    [
        get_nccl_backend(),
        f"{get_device_name()}:{get_nccl_backend()}",
        default_backend(),
        default_backend("cpu"),
        normalize_backend(f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"),
    ],
)
def test_backend_strings_from_the_helpers_start_a_gloo_group(backend):
    with _group(backend):
        t = torch.ones(2, device=get_device_id())
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0]
    assert not dist.is_initialized()


def test_normalize_backend():
    assert normalize_backend("cpu:gloo,cpu:gloo") == "cpu:gloo"
    assert normalize_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,cuda:nccl"
    assert normalize_backend("gloo") == "gloo"
    assert default_backend("cuda") == "cpu:gloo,cuda:nccl"
    with pytest.raises(ValueError, match="two backends"):
        normalize_backend("cpu:gloo,cpu:nccl")


def test_rng_state_round_trips_and_reproduces():
    torch_device = get_torch_device()
    state = torch_device.get_rng_state()
    first = torch.rand(4, device=get_device_id())
    torch_device.set_rng_state(state)
    assert torch.equal(torch.rand(4, device=get_device_id()), first)
    # the checkpoint managers' pattern: save cpu + device state, restore both
    saved = {"cpu": torch.get_rng_state(), get_device_name(): torch_device.get_rng_state()}
    expected = torch.rand(3)
    torch.set_rng_state(saved["cpu"])
    torch_device.set_rng_state(saved[get_device_name()])
    assert torch.equal(torch.rand(3), expected)
    torch_device.set_rng_state_all(torch_device.get_rng_state_all())
    torch_device.manual_seed(3)
    seeded = torch.rand(2)
    torch_device.manual_seed_all(3)
    assert torch.equal(torch.rand(2), seeded)
    assert torch_device.initial_seed() == 3


def test_device_module_calls_have_cpu_meaning():
    d = get_torch_device()
    assert d == torch.cpu and d.is_available() and d.device_count() == 1
    assert d.current_device() == "cpu" and d.get_device_name() == "cpu"
    d.set_device(get_device_id())
    d.set_device(0)
    d.synchronize()
    d.empty_cache()
    d.ipc_collect()
    d.set_per_process_memory_fraction(0.5)
    d.reset_peak_memory_stats()
    d.reset_accumulated_memory_stats()
    stats = (d.memory_allocated(), d.max_memory_allocated(), d.memory_reserved(), d.max_memory_reserved())
    assert stats == (0, 0, 0, 0) and d.memory_stats() == {}
    free, total = d.mem_get_info()
    assert 0 <= free <= total and total > 0
    assert d.get_device_properties(0).total_memory == total
    d.memory._record_memory_history(enabled=None)
    # the overlap pattern of GPU kernels and activation offload: side stream, events, waits
    side, start, end = d.Stream(torch.device(get_device_id())), d.Event(enable_timing=True), d.Event()
    d.current_stream().record_event(start)
    with d.stream(side):
        assert d.current_stream() is side
        side.wait_stream(d.default_stream())
        side.record_event(end)
    d.current_stream().wait_event(end)
    d.current_stream().synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0


def test_fully_shard_on_the_helpers_mesh(monkeypatch):
    from torch.distributed.fsdp import fully_shard

    from verl.utils.fsdp_utils.offload import load_fsdp_param_and_grad
    from verl.workers.engine.fsdp.utils import create_device_mesh, get_sharding_strategy
    from verl.workers.fsdp.distributed import device_for_rank, init_distributed

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    init_distributed(get_device_name(), rank=0, world_size=1, timeout_s=60)
    try:
        assert dist.get_backend() == "gloo"
        mesh = create_device_mesh(world_size=1, fsdp_size=-1)
        assert mesh.device_type == "cpu" and mesh.mesh_dim_names == ("fsdp",)
        assert get_sharding_strategy(mesh).name == "FULL_SHARD"
        assert device_for_rank(get_device_name(), 0) == torch.device(get_device_id())
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        fully_shard(model, mesh=mesh)
        load_fsdp_param_and_grad(model, get_device_id())
        loss = model(torch.randn(5, 4).to(get_device_id())).sum()
        loss.backward()
        assert all(p.grad is not None and p.device.type == "cpu" for p in model.parameters())
    finally:
        dist.destroy_process_group()
