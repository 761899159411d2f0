"""Device helpers: one place that decides between CUDA and CPU.

Code that would otherwise hard-code ``"cuda"`` asks here instead, so the same
worker runs on a laptop CPU (gloo) and on a GPU node (nccl) unchanged. CUDA is the
only accelerator this build drives; the NPU names exist so code written for verl can
test them and take its CUDA/CPU branch.
"""

from __future__ import annotations

import logging
import os
import time
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

__all__ = [
    "is_cuda_available",
    "is_npu_available",
    "is_torch_npu_available",
    "get_device_name",
    "get_torch_device",
    "CpuDeviceModule",
    "get_device_id",
    "get_nccl_backend",
    "get_resource_name",
    "get_visible_devices_keyword",
    "set_expandable_segments",
    "auto_set_device",
    "get_device_capability",
    "is_device_available",
    "manual_seed",
    "manual_seed_all",
]

logger = logging.getLogger(__name__)

is_cuda_available: bool = torch.cuda.is_available()
# Ascend NPUs are not supported; the name exists so code written for verl can test it.
is_npu_available: bool = False


def is_torch_npu_available(check_device: bool = True) -> bool:
    """Always False: this build has no Ascend NPU support (``torch_npu`` is never imported)."""
    return False


def get_device_name() -> str:
    """Return ``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if is_cuda_available else "cpu"


class _CpuEvent(torch.cpu.Event):
    """``torch.cpu.Event`` that takes ``torch.cuda.Event``'s arguments and times with the host clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._time: float | None = None

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def elapsed_time(self, end_event: _CpuEvent) -> float:
        """Milliseconds from this event to ``end_event``, both recorded."""
        if self._time is None or end_event._time is None:
            raise RuntimeError("elapsed_time: both events must be recorded first")
        return (end_event._time - self._time) * 1000.0


class _CpuStream(torch.cpu.Stream):
    """``torch.cpu.Stream`` with ``torch.cuda.Stream``'s calls: CPU work is in order, so waits are no-ops."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        super().__init__()

    def record_event(self, event: _CpuEvent | None = None) -> _CpuEvent:
        event = event if event is not None else _CpuEvent()
        event.record(self)
        return event

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


_DEFAULT_CPU_STREAM = _CpuStream()


class CpuDeviceModule:
    """What :func:`get_torch_device` returns without CUDA: ``torch.cuda``'s calls with CPU meaning.

    ``torch.cpu`` lacks most of what GPU code calls on the device module (RNG state, memory statistics,
    ``empty_cache``...), so such code would fail on a CPU run. Here the RNG calls act on torch's CPU generator,
    memory statistics are 0 (the CPU has no caching allocator to report on), cache, stream and synchronisation
    calls are no-ops, and anything else (``amp``, ``StreamContext``...) comes from ``torch.cpu``. It compares equal to
    ``torch.cpu``, so ``get_torch_device() == torch.cpu`` still tells a CPU run.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is torch.cpu or isinstance(other, CpuDeviceModule)

    def __hash__(self) -> int:
        return hash(torch.cpu)

    def __repr__(self) -> str:
        return "<verl CPU device module (torch.cpu)>"

    # --- device selection: one CPU "device", always usable
    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        """No-op: a CPU process has a single device."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(device: Any = None) -> SimpleNamespace:
        """Name, host memory and core count, for code that sizes work from ``total_memory``."""
        return SimpleNamespace(name="cpu", total_memory=_host_memory()[1], multi_processor_count=os.cpu_count() or 1)

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """No-op: CPU ops have finished when they return."""

    # --- streams and events: ordered CPU work, so waiting is free
    Stream = _CpuStream
    Event = _CpuEvent

    @staticmethod
    def current_stream(device: Any = None) -> _CpuStream:
        current = torch.cpu.current_stream()
        return current if isinstance(current, _CpuStream) else _DEFAULT_CPU_STREAM

    @staticmethod
    def default_stream(device: Any = None) -> _CpuStream:
        return _DEFAULT_CPU_STREAM

    # --- random number generation: the CPU generator
    @staticmethod
    def get_rng_state(device: Any = "cpu") -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = "cpu") -> None:
        torch.set_rng_state(new_state)

    @staticmethod
    def get_rng_state_all() -> list[torch.Tensor]:
        return [torch.get_rng_state()]

    @staticmethod
    def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
        for state in new_states[:1]:
            torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def seed() -> None:
        torch.seed()

    @staticmethod
    def seed_all() -> None:
        torch.seed()

    @staticmethod
    def initial_seed() -> int:
        return torch.initial_seed()

    # --- memory: no caching allocator, so no statistics and nothing to free
    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def ipc_collect() -> None:
        pass

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, Any]:
        return {}

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        pass

    @staticmethod
    def reset_accumulated_memory_stats(device: Any = None) -> None:
        pass

    @staticmethod
    def reset_max_memory_allocated(device: Any = None) -> None:
        pass

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        pass

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)`` bytes of host memory, the memory a CPU run allocates from."""
        return _host_memory()

    # ``torch.cuda.memory.*`` spellings (memory-history recording, allocator settings) as no-ops.
    memory = SimpleNamespace(
        _record_memory_history=lambda *args, **kwargs: None,
        _dump_snapshot=lambda *args, **kwargs: None,
        _set_allocator_settings=lambda *args, **kwargs: None,
        empty_cache=lambda: None,
        memory_allocated=lambda device=None: 0,
        max_memory_allocated=lambda device=None: 0,
        memory_reserved=lambda device=None: 0,
        max_memory_reserved=lambda device=None: 0,
    )


def _host_memory() -> tuple[int, int]:
    """``(available, total)`` bytes of RAM, or ``(0, 0)`` where the platform does not say."""
    try:
        import psutil

        mem = psutil.virtual_memory()
        return int(mem.available), int(mem.total)
    except Exception:  # psutil missing or unsupported: fall back to sysconf
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0, 0


_CPU_DEVICE_MODULE = CpuDeviceModule()


def get_torch_device() -> ModuleType | CpuDeviceModule:
    """The device module for device-agnostic calls: ``torch.cuda`` on CUDA, else a :class:`CpuDeviceModule`.

    Callers write ``get_torch_device().synchronize()`` / ``.get_rng_state()`` / ``.memory_allocated()`` once and
    get CPU semantics on a CPU run instead of an AttributeError from ``torch.cpu``.
    """
    return torch.cuda if is_cuda_available else _CPU_DEVICE_MODULE


def get_device_id() -> int | str:
    """The current device for ``tensor.to(...)`` / ``device=...``: the CUDA index, or ``"cpu"`` without CUDA.

    An integer always means a CUDA device to torch, so a CPU run gets the device string instead (what
    ``torch.cpu.current_device()`` returns too). Build a device with ``torch.device(get_device_id())``, not
    ``f"{get_device_name()}:{get_device_id()}"``.
    """
    return torch.cuda.current_device() if is_cuda_available else "cpu"


def get_nccl_backend() -> str:
    """Process-group backend for collectives: ``"nccl"`` on CUDA, ``"gloo"`` on CPU.

    ``init_process_group(backend=get_nccl_backend())`` and ``f"{get_device_name()}:{get_nccl_backend()}"`` are
    valid on both. ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"`` names ``cpu`` twice on a CPU run,
    which torch rejects; use :func:`verl.utils.distributed.default_backend` (or pass such a string through
    :func:`verl.utils.distributed.normalize_backend`).
    """
    return "nccl" if is_cuda_available else "gloo"


def get_resource_name() -> str:
    """The Ray resource that counts accelerators (``"GPU"``); Ray lists CUDA devices under it."""
    return "GPU"


def get_visible_devices_keyword() -> str:
    """The environment variable that restricts which accelerators a process sees (``CUDA_VISIBLE_DEVICES``)."""
    return "CUDA_VISIBLE_DEVICES"


def set_expandable_segments(enable: bool) -> None:
    """Switch the CUDA caching allocator's expandable segments on or off (fewer fragmentation OOMs when on).

    A no-op without CUDA: the CPU allocator has no such setting.
    """
    if not is_cuda_available:
        return
    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{bool(enable)}")


def _device_of(config: Any) -> Any:
    trainer = getattr(config, "trainer", None)
    return getattr(trainer, "device", None) if trainer is not None else None


def auto_set_device(config: Any) -> None:
    """Point ``config.trainer.device`` at the accelerator this machine has.

    On a CUDA machine a foreign accelerator name (``npu``, ...) becomes ``cuda``, with a warning. ``auto`` is left
    alone because it already resolves to the detected device, and so is ``cpu``: running on the CPU of a GPU
    machine is a choice this package supports (verl turns it into the accelerator). On a machine without an
    accelerator nothing changes (``trainer.device=cuda`` then fails with a clear error when the worker starts).
    """
    current = _device_of(config)
    if current is None:
        return
    detected = get_device_name()
    if detected == "cpu" or current in (detected, "auto", "cpu"):
        return
    logger.warning(
        "trainer.device=%s but this machine has %s devices; using trainer.device=%s", current, detected, detected
    )
    config.trainer.device = detected


def get_device_capability(device_id: int = 0) -> tuple[int | None, int | None]:
    """``(major, minor)`` compute capability of CUDA device ``device_id``; ``(None, None)`` without CUDA."""
    if not is_cuda_available:
        return None, None
    return torch.cuda.get_device_capability(device_id)


def is_device_available() -> bool:
    """Whether an accelerator (CUDA) is visible to this process."""
    return is_cuda_available


def manual_seed(seed: int) -> None:
    """Seed the current accelerator's generator (the CPU generator without one)."""
    if is_cuda_available:
        torch.cuda.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every accelerator's generator (the CPU generator without one)."""
    if is_cuda_available:
        torch.cuda.manual_seed_all(seed)
    else:
        torch.manual_seed(seed)
