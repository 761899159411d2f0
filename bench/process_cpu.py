"""CPU time of every process of a run, sampled from ``/proc``: where the cores go besides the processes on the
timeline.

A Ray task timeline shows when a worker was inside an actor call; it does not show the controller side (the
rollouter's agent loops, the task runner, the driver, Ray's own daemons) whose calls last the whole run, nor that
a process was busy outside any call. :class:`ProcessTreeCpu` samples the cumulative user + system CPU time of the
process tree under a root (a ``main_ppo`` subprocess: its Ray daemons and workers are its descendants) every
``interval_s`` seconds on a thread, and :func:`cores_busy` says how many cores each process kept busy over a window
of wall-clock time. Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ProcessTreeCpu", "cores_busy", "process_name"]

_PROC = Path("/proc")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_name(cmdline: str) -> str:
    """A readable name: a Ray worker's actor class (``ray::Rollouter.fit`` and ``ray::name:Rollouter.fit`` ->
    ``Rollouter``; ``IDLE`` for a worker not yet given an actor), else the executable's file name (``raylet``,
    ``gcs_server``, ``python``)."""
    cmdline = cmdline.strip()
    if cmdline.startswith("ray::"):
        words = cmdline[len("ray::") :].split()
        title = words[0] if words else ""
        return title.rsplit(":", 1)[-1].split(".")[0] or "IDLE"
    first = cmdline.split()[0] if cmdline else "?"
    return os.path.basename(first)


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds used so far) of ``pid``, or None once it has gone."""
    try:
        text = (_PROC / pid / "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name in parentheses may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def _cmdline(pid: str) -> str:
    try:
        return (_PROC / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class ProcessTreeCpu:
    """Samples the CPU seconds of ``root`` and its descendants until :meth:`stop`.

    ``samples[pid]`` is the list of ``(wall time, CPU seconds)`` of that process; ``names[pid]`` its latest
    :func:`process_name` (Ray renames a worker once it hosts an actor).
    """

    root: int
    interval_s: float = 0.25
    samples: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    names: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-cpu", daemon=True)

    def start(self) -> ProcessTreeCpu:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)
        self.sample()

    def sample(self) -> None:
        """One reading of every process in the tree."""
        now = time.time()
        stats = {pid: stat for pid in os.listdir(_PROC) if pid.isdigit() and (stat := _stat(pid)) is not None}
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (parent, _) in stats.items():
            children[parent].append(int(pid))
        tree, frontier = set(), [self.root]
        while frontier:
            pid = frontier.pop()
            if pid in tree:
                continue
            tree.add(pid)
            frontier.extend(children.get(pid, []))
        for pid in tree:
            stat = stats.get(str(pid))
            if stat is None:
                continue
            self.samples[pid].append((now, stat[1]))
            cmdline = _cmdline(str(pid))
            if cmdline.strip():  # an exiting process's cmdline reads empty: it keeps the name it had
                self.names[pid] = process_name(cmdline)


def _cpu_at(series: list[tuple[float, float]], moment: float) -> float:
    """CPU seconds of a process at ``moment``: its last sample at or before it (0 before its first)."""
    value = 0.0
    for when, cpu in series:
        if when > moment:
            break
        value = cpu
    return value


def cores_busy(sampler: ProcessTreeCpu, start: float, end: float) -> dict[str, float]:
    """Cores each process name kept busy over the wall-clock window [start, end] (processes of one name summed,
    biggest first; every process sampled, idle ones at 0), and ``"total"``. Readings are ``interval_s`` apart, so
    a window should be many intervals long."""
    if end <= start:
        raise ValueError(f"an empty window: {start} .. {end}")
    per_name: dict[str, float] = defaultdict(float)
    for pid, series in sampler.samples.items():
        used = _cpu_at(series, end) - _cpu_at(series, start)
        per_name[sampler.names.get(pid, "?")] += used / (end - start)
    ordered = dict(sorted(per_name.items(), key=lambda item: -item[1]))
    return {"total": sum(ordered.values()), **ordered}
