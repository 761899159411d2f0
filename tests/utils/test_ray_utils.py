"""verl.utils.ray_utils helpers: auto_await from every kind of caller, the event-loop getter and the
NOSET_VISIBLE_DEVICES check without Ray; the timeline dump on the shared cluster (parallel_put is covered with Ray by
the single-controller tests)."""

import asyncio
import json
import threading
import time

import pytest
from omegaconf import OmegaConf

from verl.utils.ray_utils import auto_await, dump_ray_timeline, get_event_loop, ray_noset_visible_devices


@auto_await
async def _double(x):
    await asyncio.sleep(0)
    return 2 * x, threading.get_ident()


def test_auto_await_runs_for_plain_callers_and_returns_a_coroutine_to_async_ones():
    assert _double(3)[0] == 6  # no running loop: run to completion

    async def awaiting():
        return await _double(4)

    assert asyncio.run(awaiting())[0] == 8

    def sync_callback():  # plain code inside a running loop: runs on a helper thread instead of deadlocking
        return _double(5)

    async def loop_with_sync_callback():
        return sync_callback(), threading.get_ident()

    (value, worker_thread), loop_thread = asyncio.run(loop_with_sync_callback())
    assert value == 10 and worker_thread != loop_thread


def test_get_event_loop_installs_one_in_a_fresh_thread():
    found = {}

    def run():
        found["loop"] = get_event_loop()
        found["same"] = get_event_loop() is found["loop"]

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert isinstance(found["loop"], asyncio.AbstractEventLoop) and found["same"]
    found["loop"].close()


def test_noset_visible_devices_reads_any_accelerator_flag():
    assert not ray_noset_visible_devices({})
    assert ray_noset_visible_devices({"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"})
    assert not ray_noset_visible_devices({"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.ray
def test_timeline_json_file_receives_the_actor_calls_of_the_run(ray_cluster, tmp_path):
    @ray_cluster.remote(num_cpus=0)
    class Stepper:
        def step_for_the_timeline(self) -> int:
            return 1

    stepper = Stepper.remote()
    assert ray_cluster.get(stepper.step_for_the_timeline.remote()) == 1
    path = tmp_path / "nested" / "timeline.json"
    config = OmegaConf.create({"ray_kwargs": {"timeline_json_file": str(path)}})
    for _ in range(40):  # workers report task events about once a second
        assert dump_ray_timeline(config) == str(path)
        names = {event.get("cat") for event in json.loads(path.read_text())}
        if "task::Stepper.step_for_the_timeline" in names:
            break
        time.sleep(0.25)
    assert "task::Stepper.step_for_the_timeline" in names
    assert dump_ray_timeline(OmegaConf.create({"ray_kwargs": {"timeline_json_file": None}})) is None
    assert dump_ray_timeline(OmegaConf.create({})) is None
