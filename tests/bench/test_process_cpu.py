"""bench/process_cpu.py: the CPU time of a real process tree, named and counted per window."""

import subprocess
import sys
import time

import pytest

from bench.process_cpu import ProcessTreeCpu, cores_busy, process_name

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


@pytest.mark.parametrize(
    "cmdline, name",
    [
        ("ray::Rollouter.fit", "Rollouter"),
        ("ray::HFRolloutServer", "HFRolloutServer"),
        ("ray::Colocated_actor_abc_rank0:Colocated_actor.actor_update_actor", "Colocated_actor"),
        ("ray::", "IDLE"),
        ("ray::IDLE", "IDLE"),
        ("/usr/lib/ray/core/src/ray/raylet/raylet --node-id=1", "raylet"),
        ("/usr/bin/python3 -m verl.trainer.main_ppo", "python3"),
    ],
)
def test_process_names(cmdline, name):
    assert process_name(cmdline) == name


def test_a_child_that_burns_cpu_is_counted_and_a_sleeping_parent_is_not():
    # the parent sleeps while its child spins for 1.5 s of CPU: the tree's busy time is the child's
    script = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {BURN.format(seconds=1.5)!r}])\n"
        "child.wait()\n"
        "time.sleep(0.3)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    sampler = ProcessTreeCpu(proc.pid, interval_s=0.05).start()
    start = time.time()
    proc.wait()
    sampler.stop()
    end = time.time()
    assert len(sampler.samples) == 2, sampler.names  # the parent and its child, nothing else on the machine
    busy = cores_busy(sampler, start, end)
    cpu_seconds = busy["total"] * (end - start)
    assert 1.3 < cpu_seconds < 2.0, busy  # the child's 1.5 s, and the parent's start-up
    assert all(name.startswith("python") for name in sampler.names.values()), sampler.names


def test_an_empty_window_is_refused():
    sampler = ProcessTreeCpu(1)
    with pytest.raises(ValueError, match="empty window"):
        cores_busy(sampler, 5.0, 5.0)


def test_an_exited_child_keeps_its_name():
    # the parent does not reap its child, which then reads as a zombie with an empty cmdline until the parent ends
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.3)'])\n"
        "time.sleep(1.0)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    sampler = ProcessTreeCpu(proc.pid, interval_s=0.05).start()
    proc.wait()
    sampler.stop()
    assert len(sampler.names) == 2
    assert all(name.startswith("python") for name in sampler.names.values()), sampler.names
