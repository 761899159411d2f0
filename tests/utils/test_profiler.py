"""verl.utils.profiler: DistProfiler with the torch backend, its config, timers and memory logging."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from verl.base_config import ConfigError
from verl.utils.extras import MissingExtraError
from verl.utils.profiler import (
    DistProfiler,
    DistProfilerExtension,
    GPUMemoryLogger,
    ProfilerConfig,
    TorchProfilerScheduleConfig,
    TorchProfilerToolConfig,
    build_rollout_dist_profiler,
    gather_timing,
    log_gpu_memory_usage,
    mark_annotate,
    marked_timer,
    reduce_timing,
    simple_timer,
)
from verl.utils.profiler.config import NPUToolConfig, PrecisionDebuggerToolConfig
from verl.utils.profiler.performance import _timer

CPU_ONLY = TorchProfilerToolConfig(contents=["cpu"])


class _Worker:
    def __init__(self, config, tool_config=None, rank=0):
        self.profiler = DistProfiler(rank=rank, config=config, tool_config=tool_config, save_file_prefix="actor")
        self.calls = 0

    @DistProfiler.annotate(role="update_actor")
    def update(self):
        self.calls += 1
        return (torch.ones(8, 8) @ torch.ones(8, 8)).sum()


def _names(path):
    with open(path) as f:
        return {event.get("name") for event in json.load(f)["traceEvents"]}


def test_config_validation_names_the_key():
    with pytest.raises(ConfigError, match="contents"):
        TorchProfilerToolConfig(contents=["gpu"])
    with pytest.raises(ConfigError, match="profile_token_end"):
        TorchProfilerToolConfig(profile_token_start=5, profile_token_end=5)
    with pytest.raises(ConfigError, match="active"):
        TorchProfilerScheduleConfig(active=-1)
    with pytest.raises(ConfigError, match="level"):
        NPUToolConfig(level="level9")
    assert PrecisionDebuggerToolConfig(stages=["actor_update"]).stages == ["actor_update"]
    both = ProfilerConfig(tool="torch", ranks=[0, 1]).union(ProfilerConfig(tool="torch", enable=True, ranks=[2]))
    assert both.enable and both.ranks == [0, 1, 2]
    assert ProfilerConfig(tool="torch", ranks=[0, 1]).intersect(ProfilerConfig(tool="torch", ranks=[1])).ranks == [1]
    with pytest.raises(ValueError, match="different tools"):
        ProfilerConfig(tool="torch").union(ProfilerConfig(tool="nsys"))


def test_disabled_or_unselected_profiler_is_a_no_op(tmp_path):
    worker = _Worker(None)
    worker.profiler.start()
    assert worker.update() == 512 and not worker.profiler.check_this_step()
    worker.profiler.stop()
    other_rank = _Worker(ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path)), rank=1)
    assert not other_rank.profiler.check_this_rank()  # default: rank 0 only
    other_rank.profiler.start()
    other_rank.update()
    other_rank.profiler.stop()
    assert os.listdir(tmp_path) == []


def test_torch_trace_contains_annotated_stages_and_timers(tmp_path):
    worker = _Worker(ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path)), CPU_ONLY)
    worker.profiler.start(profile_step=3)
    timing = {}
    with marked_timer("gen", timing):
        worker.update()
    worker.profiler.stop()
    assert timing["gen"] > 0 and worker.calls == 1
    names = _names(tmp_path / "actor_rank0_step3.json")
    assert {"update_actor", "gen"} <= names


def test_discrete_mode_writes_one_trace_per_stage(tmp_path):
    tool = TorchProfilerToolConfig(contents=["cpu"], discrete=True)
    worker = _Worker(ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path)), tool)
    assert worker.profiler.is_discrete_mode()
    worker.profiler.start(profile_step=1)
    worker.update()
    worker.profiler.stop()
    assert os.listdir(tmp_path) == ["actor_rank0_step1_update_actor.json"]


def test_schedule_saves_the_active_window(tmp_path):
    tool = TorchProfilerToolConfig(contents=["cpu"], schedule=TorchProfilerScheduleConfig(wait=1, active=1, repeat=1))
    worker = _Worker(ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path)), tool)
    worker.profiler.start(profile_step=2)
    for _ in range(3):
        worker.update()
        worker.profiler.step()
    worker.profiler.stop()
    assert os.listdir(tmp_path) == ["actor_rank0_step2_w1.json"]


def test_finish_hook_runs_once_with_the_run_context(tmp_path):
    out = tmp_path / "hook.txt"
    config = ProfilerConfig(
        tool="torch",
        enable=True,
        save_path=str(tmp_path / "traces"),
        finish_hook_cmd=f'echo "$VERL_PROFILE_RANK $VERL_PROFILE_ROLE $VERL_PROFILE_TOOL" >> {out}',
    )
    worker = _Worker(config, CPU_ONLY)
    worker.profiler.start()
    worker.profiler.stop(run_command=False)
    assert not out.exists()
    worker.profiler.start()
    worker.profiler.stop(run_command=True)
    assert out.read_text().split() == ["0", "actor", "torch"]


def test_backends_not_in_this_build_fail_when_enabled():
    with pytest.raises(MissingExtraError, match="'nsys'.*not part of this build"):
        DistProfiler(rank=0, config=ProfilerConfig(tool="nsys", enable=True))
    assert DistProfiler(rank=0, config=ProfilerConfig(tool="nsys", enable=False)).check_enable() is False
    with pytest.raises(ValueError, match="unknown profiler tool 'perf'"):
        DistProfiler(rank=0, config=ProfilerConfig(tool="perf", enable=True))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_torch_memory_needs_cuda(tmp_path):
    profiler = DistProfiler(rank=0, config=ProfilerConfig(tool="torch_memory", enable=True, save_path=str(tmp_path)))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        profiler.start()


def test_rollout_profiler_maps_global_ranks_to_replicas():
    config = ProfilerConfig(tool="torch", enable=True, ranks=[0, 9])
    assert build_rollout_dist_profiler(1, 8, config).check_this_rank()  # global rank 9 lives on replica 1
    assert not build_rollout_dist_profiler(2, 8, config).check_this_rank()


def test_extension_methods_are_registered_for_every_rank():
    from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch

    for name in ("start_profile", "stop_profile", "step_profile"):
        attrs = getattr(getattr(DistProfilerExtension, name), MAGIC_ATTR)
        assert attrs["dispatch_mode"] == Dispatch.ONE_TO_ALL, name


def test_timers_accumulate():
    timing = {}
    with simple_timer("a", timing):
        pass
    with simple_timer("a", timing):
        pass

    from contextlib import contextmanager

    @contextmanager
    def old_style(name, raw):
        yield from _timer(name, raw)

    with old_style("b", timing):
        pass
    assert set(timing) == {"a", "b"} and timing["a"] >= 0
    assert reduce_timing(timing) is timing and gather_timing({"a": 1.0}) == {"a": [1.0]}


def test_memory_logging(caplog, capsys):
    logger = logging.getLogger("test.memory")
    with caplog.at_level(logging.INFO, logger="test.memory"):
        log_gpu_memory_usage("after load", logger=logger, level=logging.INFO)

        @GPUMemoryLogger(role="actor", logger=logger, level=logging.INFO)
        def work(x):
            return x + 1

        assert work(1) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("after load, memory allocated (GB):")
    assert messages[1].startswith("actor Before work") and messages[2].startswith("actor After work")
    log_gpu_memory_usage("printed")
    assert "printed, memory allocated" in capsys.readouterr().out


def test_mark_annotate_names_the_call_in_a_trace():
    @mark_annotate("my_stage")
    def stage():
        return torch.ones(2).sum()

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        stage()
    assert any(e.name == "my_stage" for e in prof.events())
