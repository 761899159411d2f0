"""What each process did, and when: a chart and busy fractions from a run's Ray task timeline.

A run started with ``ray_kwargs.timeline_json_file=PATH`` leaves Ray's Chrome-trace record of every actor method
call (process, method, start, duration). This script keeps the processes that generate or train, sorts each call
into generation, training, weight sync or other, and reports over the steady-state window (from the start of update
``--skip-updates + 1`` to the end of the last update):

- per process: the fraction of the window it spent in any call (busy), and in generation and training calls;
- pipeline efficiency: busy process-seconds of generation and training over (processes x window), the share of the
  machine the run kept working; 1.0 means no process ever waited;
- fully async: the share of the window the trainer spent blocked on the message queue (``MessageQueue.get``),
  drawn as a row of its own.

    python bench/timeline.py run_timeline.json --out bench/results/timeline.png

Overlapping calls of one process (an async actor serving two requests) count once.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GENERATION, TRAINING, WEIGHT_SYNC, OTHER = "generation", "training", "weight sync", "other"
WAITING = "waiting for samples"
COLORS = {
    GENERATION: "tab:blue",
    TRAINING: "tab:orange",
    WEIGHT_SYNC: "tab:green",
    OTHER: "lightgrey",
    WAITING: "tab:red",
}
TRAINING_METHODS = ("update_actor", "compute_log_prob", "compute_ref_log_prob", "update_critic", "compute_values")
WEIGHT_SYNC_METHODS = ("update_weights", "send_weights", "update_rollout_weights", "receive_weights")
# Calls that last the whole run or only wrap other processes' work (they would count as busy from start to end).
COORDINATOR_CLASSES = ("TaskRunner", "AsyncTaskRunner", "Rollouter", "MessageQueue", "AgentLoopWorker")


@dataclass(frozen=True)
class Call:
    """One actor method call: who ran it, what it was, and when (seconds from the first call of the trace)."""

    process: str
    actor_class: str
    method: str
    start: float
    end: float

    @property
    def kind(self) -> str:
        if self.actor_class == "MessageQueue" and self.method == "get":  # the trainer blocked on an empty queue
            return WAITING
        if self.method.endswith("generate_batch") or self.method == "generate":
            return GENERATION
        if any(self.method.endswith(name) for name in TRAINING_METHODS):
            return TRAINING
        if any(self.method.endswith(name) for name in WEIGHT_SYNC_METHODS):
            return WEIGHT_SYNC
        return OTHER


@dataclass
class Lane:
    """The calls of one worker process."""

    process: str
    actor_class: str
    calls: list[Call] = field(default_factory=list)

    def busy(self, start: float, end: float, kinds: Iterable[str] | None = None) -> float:
        """Seconds within [start, end] covered by at least one call of ``kinds`` (all kinds when None)."""
        wanted = set(kinds) if kinds is not None else None
        spans = sorted(
            (max(c.start, start), min(c.end, end))
            for c in self.calls
            if (wanted is None or c.kind in wanted) and c.end > start and c.start < end
        )
        covered, reach = 0.0, start
        for lo, hi in spans:
            lo = max(lo, reach)
            if hi > lo:
                covered += hi - lo
                reach = hi
        return covered


def _actor_call_events(trace_path: str | Path) -> list[dict[str, Any]]:
    events = json.loads(Path(trace_path).read_text())
    tasks = [e for e in events if str(e.get("cat", "")).startswith("task::") and e.get("ph") == "X"]
    if not tasks:
        raise ValueError(f"{trace_path}: no actor method calls in this Ray timeline")
    return tasks


def trace_origin(trace_path: str | Path) -> float:
    """Wall-clock time (seconds since the epoch) of the trace's first actor call, the zero of its calls' times."""
    return min(float(e["ts"]) for e in _actor_call_events(trace_path)) / 1e6


def read_calls(trace_path: str | Path) -> list[Call]:
    """Every actor method call of a Ray timeline file, in start order."""
    tasks = _actor_call_events(trace_path)
    origin = min(float(e["ts"]) for e in tasks)
    calls = []
    for event in tasks:
        qualified = event["cat"][len("task::") :].rsplit(":", 1)[-1]  # "Class.method" (named actors: "name:Class...")
        actor_class, _, method = qualified.rpartition(".")
        start = (float(event["ts"]) - origin) / 1e6
        calls.append(Call(str(event["tid"]), actor_class, method, start, start + float(event["dur"]) / 1e6))
    return sorted(calls, key=lambda c: c.start)


def worker_lanes(calls: list[Call]) -> list[Lane]:
    """One lane per process that generated or trained, coordinators left out; training lanes first."""
    lanes: dict[str, Lane] = {}
    for call in calls:
        if call.actor_class.startswith(COORDINATOR_CLASSES):
            continue
        lanes.setdefault(call.process, Lane(call.process, call.actor_class)).calls.append(call)
    working = [lane for lane in lanes.values() if any(c.kind in (GENERATION, TRAINING) for c in lane.calls)]
    return sorted(working, key=lambda lane: (not any(c.kind == TRAINING for c in lane.calls), lane.process))


def queue_lane(calls: list[Call]) -> Lane | None:
    """The message queue's ``get`` calls (fully async): how long the trainer waited for samples, drawn but not
    counted as work."""
    waits = [c for c in calls if c.kind == WAITING]
    return Lane(waits[0].process, "MessageQueue.get", waits) if waits else None


def steady_window(lanes: list[Lane], skip_updates: int) -> tuple[float, float]:
    """From the start of update ``skip_updates + 1`` (of the first training lane) to the end of the last update."""
    updates = sorted(
        (c for lane in lanes for c in lane.calls if c.method.endswith("update_actor")), key=lambda c: c.start
    )
    first_lane = [c for c in updates if c.process == updates[0].process] if updates else []
    if len(first_lane) <= skip_updates:
        raise ValueError(f"the timeline has {len(first_lane)} updates; cannot skip {skip_updates} of them")
    return first_lane[skip_updates].start, max(c.end for c in updates)


def summarize(lanes: list[Lane], window: tuple[float, float], queue: Lane | None = None) -> dict[str, Any]:
    """Busy fractions per process and the pipeline efficiency over ``window``; with the queue's lane, the share
    of the window the trainer waited for samples."""
    start, end = window
    length = end - start
    per_process = []
    for lane in lanes:
        per_process.append(
            {
                "process": lane.process,
                "actor_class": lane.actor_class,
                "busy": lane.busy(start, end) / length,
                "generation": lane.busy(start, end, [GENERATION]) / length,
                "training": lane.busy(start, end, [TRAINING]) / length,
                "weight_sync": lane.busy(start, end, [WEIGHT_SYNC]) / length,
            }
        )
    working = sum(lane.busy(start, end, [GENERATION, TRAINING]) for lane in lanes)
    summary = {
        "window_s": length,
        "window": [start, end],
        "processes": per_process,
        "pipeline_efficiency": working / (len(lanes) * length),
    }
    if queue is not None:
        summary["trainer_waiting_for_samples"] = queue.busy(start, end) / length
    return summary


def draw(lanes: list[Lane], summary: dict[str, Any], out: str | Path, title: str, queue: Lane | None = None) -> Path:
    """A PNG with one row per process and a bar per call, coloured by kind, and the queue's waits in a row of their
    own; the steady window is shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = lanes + ([queue] if queue is not None else [])
    fig, ax = plt.subplots(figsize=(12, 1.4 + 0.6 * len(rows)))
    for row, lane in enumerate(rows):
        for kind in (OTHER, WEIGHT_SYNC, GENERATION, TRAINING, WAITING):
            spans = [(c.start, c.end - c.start) for c in lane.calls if c.kind == kind]
            ax.broken_barh(spans, (row - 0.35, 0.7), facecolors=COLORS[kind])
    start, end = summary["window"]
    ax.axvspan(start, end, color="k", alpha=0.05, zorder=0)
    labels = [
        f"{lane.actor_class} {lane.process[-6:]}\nbusy {p['busy']:.0%}" for lane, p in zip(lanes, summary["processes"])
    ]
    if queue is not None:
        labels.append(f"trainer waits\n{summary['trainer_waiting_for_samples']:.0%}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first actor call (shaded: steady-state window)")
    ax.set_title(f"{title} - pipeline efficiency {summary['pipeline_efficiency']:.2f}", fontsize=10)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in COLORS.items()],
        loc="lower left",
        bbox_to_anchor=(0, 1.08),
        fontsize=8,
        ncol=len(COLORS),
        frameon=False,
    )
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


@dataclass
class Timeline:
    """A trace read and summarised: the working lanes, the queue's lane (fully async) and the figures."""

    lanes: list[Lane]
    queue: Lane | None
    summary: dict[str, Any]

    def draw(self, out: str | Path, title: str) -> Path:
        return draw(self.lanes, self.summary, out, title, self.queue)


def analyse(trace_path: str | Path, skip_updates: int = 1) -> Timeline:
    calls = read_calls(trace_path)
    lanes = worker_lanes(calls)
    if not lanes:
        raise ValueError(f"{trace_path}: no process generated or trained")
    queue = queue_lane(calls)
    summary = summarize(lanes, steady_window(lanes, skip_updates), queue)
    origin = trace_origin(trace_path)
    summary["window_epoch_s"] = [origin + summary["window"][0], origin + summary["window"][1]]
    return Timeline(lanes, queue, summary)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a Ray timeline (ray_kwargs.timeline_json_file)")
    parser.add_argument("--out", type=Path, default=None, help="PNG to draw (default: beside the trace)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--skip-updates", type=int, default=1, help="warm-up updates left out of the window")
    args = parser.parse_args(argv)
    timeline = analyse(args.trace, args.skip_updates)
    out = timeline.draw(args.out or args.trace.with_suffix(".png"), args.title or args.trace.stem)
    print(json.dumps(timeline.summary, indent=2))
    print(f"wrote {out}")
    return timeline.summary


if __name__ == "__main__":
    main()
