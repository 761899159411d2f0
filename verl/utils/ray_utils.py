"""Small Ray helpers shared by the single controller and the checkpoint engines.

``parallel_put`` exists because ``ray.put`` of a large object (a DataProto chunk) serialises on the calling thread:
putting the chunks of one dispatch from a few threads overlaps their serialisation and store writes.
``auto_await`` lets one ``async def`` method serve both the driver's synchronous code and async callers.
``dump_ray_timeline`` writes ``ray_kwargs.timeline_json_file``: Ray's own record of which process ran which actor
method when, the cheapest way to see where a run waited.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "auto_await",
    "dump_ray_timeline",
    "get_event_loop",
    "parallel_put",
    "ray_noset_visible_devices",
    "settle_task_events",
]

# Ray leaves the accelerator visibility variable alone for an actor when one of these is set.
NOSET_VISIBLE_DEVICES_ENV_VARS = (
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES",
    "RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES",
    "RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS",
    "RAY_EXPERIMENTAL_NOSET_ONEAPI_DEVICE_SELECTOR",
)
_DEFAULT_MAX_PUT_THREADS = 16


def _timeline_path(config: Any) -> str | None:
    ray_kwargs = config.get("ray_kwargs") or {}
    return ray_kwargs.get("timeline_json_file")


def settle_task_events(config: Any) -> None:
    """When ``ray_kwargs.timeline_json_file`` is set, wait until the workers have reported their last calls, before
    they are killed. Each process reports its task events to Ray every ``RAY_task_events_report_interval_ms`` (1 s
    by default; longer on a saturated CPU), and a process that is killed loses what it has not reported yet."""
    if not _timeline_path(config):
        return
    import time

    interval_s = int(os.environ.get("RAY_task_events_report_interval_ms", "1000")) / 1000
    time.sleep(3 * interval_s)


def dump_ray_timeline(config: Any) -> str | None:
    """Write Ray's task timeline (Chrome trace JSON) to ``ray_kwargs.timeline_json_file`` when it is set; returns the
    path written. Open it in ``chrome://tracing`` or Perfetto, or draw it with ``python bench/timeline.py``."""
    path = _timeline_path(config)
    if not path:
        return None
    import ray

    path = os.path.abspath(os.path.expanduser(str(path)))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ray.timeline(filename=path)
    return path


def ray_noset_visible_devices(env_vars: Mapping[str, str] = os.environ) -> bool:
    """True when Ray was told not to set ``*_VISIBLE_DEVICES`` for actors (the worker must pick its device)."""
    return any(env_vars.get(name) for name in NOSET_VISIBLE_DEVICES_ENV_VARS)


def parallel_put(data_list: list[Any], max_workers: int | None = None) -> list[Any]:
    """``ray.put`` every item of ``data_list`` from a thread pool; the references come back in input order.

    Args:
        data_list: the objects to store (must not be empty).
        max_workers: threads to use; default ``min(len(data_list), 16)``.
    """
    import ray

    assert len(data_list) > 0, "parallel_put: data_list must not be empty"
    if max_workers is None:
        max_workers = min(len(data_list), _DEFAULT_MAX_PUT_THREADS)
    if max_workers < 1:
        raise ValueError(f"parallel_put: max_workers must be >= 1, got {max_workers}")
    if max_workers == 1 or len(data_list) == 1:
        return [ray.put(item) for item in data_list]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="ray-put") as pool:
        return list(pool.map(ray.put, data_list))


def get_event_loop() -> asyncio.AbstractEventLoop:
    """The current thread's event loop, created and installed when the thread has none."""
    try:
        return asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


def _caller_is_coroutine(frame: Any) -> bool:
    return frame is not None and bool(frame.f_code.co_flags & inspect.CO_COROUTINE)


def auto_await(func: Callable[..., Any]) -> Callable[..., Any]:
    """Make an ``async def`` usable from synchronous code as well as awaited.

    Called from a coroutine, the wrapper returns the coroutine to await. Called from plain code with no running
    loop, it runs the coroutine to completion. Called from plain code while a loop runs on this thread (a sync
    callback inside async code), blocking that loop would deadlock, so the coroutine runs on a private loop in a
    helper thread.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        if not inspect.iscoroutine(result):
            return result
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(result)
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if _caller_is_coroutine(caller):
            return result
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="auto-await") as pool:
            return pool.submit(asyncio.run, result).result()

    return wrapper
