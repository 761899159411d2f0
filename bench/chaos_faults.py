"""The chaos soak's faults: a seeded schedule, and how each kind finds its victim process in a live run.

Victims are found the way an operator would: the cluster's actor table (class name, pid, node) and the process
tree under the task runner; each is killed with SIGKILL, so nothing in the run gets a chance to clean up.

In the fully-async recipe the agent-loop worker lives in the rollouter's process, so ``agent_loop_worker`` kills
that process while a generation is in flight (right after a step was logged), and ``rollouter`` kills it during a
step. ``reward_worker`` is a scoring process of the reward manager (``reward.num_workers``, forked under the task
runner). ``weight_sync`` kills a training rank once the trainer has logged the start of a weight sync.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FAULT_KINDS", "Fault", "Victim", "actors_of", "fault_schedule", "find_victim", "wait_for_sync_start"]

FAULT_KINDS = (
    "rollout_server",
    "agent_loop_worker",
    "trainer_rank",
    "rollouter",
    "reward_worker",
    "node",
    "weight_sync",
)
# actor class names (as the actor table has them) of each kind's victim
ROLLOUT_SERVER = "RolloutServer"
TRAINER_RANK = "Colocated"  # the worker group's merged class: Colocated<roles>
ROLLOUTER = "Rollouter"
TASK_RUNNER = "FullyAsyncTaskRunner"
SYNC_STARTED = "weight sync started at step"


@dataclass(frozen=True)
class Fault:
    """Kill one ``kind`` process once the run has logged ``step``."""

    step: int
    kind: str


@dataclass(frozen=True)
class Victim:
    kind: str
    pid: int
    node_id: str
    what: str


def fault_schedule(seed: int, faults: int, every: int, kinds: tuple[str, ...] = FAULT_KINDS) -> list[Fault]:
    """``faults`` faults about every ``every`` steps (jittered by up to a fifth of it), cycling through seeded
    permutations of ``kinds`` so that every kind comes before any repeats."""
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < faults:
        round_ = list(kinds)
        rng.shuffle(round_)
        order += round_
    jitter = max(1, every // 5)
    return [
        Fault(step=every * (i + 1) + rng.randint(-jitter, jitter), kind=kind) for i, kind in enumerate(order[:faults])
    ]


def actors_of(class_fragment: str) -> list[dict]:
    """Live actors whose class name contains ``class_fragment`` (records of the cluster's actor table)."""
    from ray._private import state

    return [
        record
        for record in state.actors().values()
        if class_fragment in (record.get("ActorClassName") or "") and record.get("State") == "ALIVE"
    ]


def _actor_victim(kind: str, class_fragment: str, rng: random.Random) -> Victim:
    live = sorted(actors_of(class_fragment), key=lambda r: r["ActorID"])
    if not live:
        raise LookupError(f"no live {class_fragment} actor to kill for a {kind} fault")
    record = rng.choice(live)
    return Victim(kind, int(record["Pid"]), record["Address"]["NodeID"], f"{record['ActorClassName']} actor")


def _reward_worker(rng: random.Random) -> Victim:
    """A scoring process of the reward manager: a process forked by the forkserver under the task runner."""
    import psutil

    runner = _actor_victim("reward_worker", TASK_RUNNER, rng)
    scorers = [
        proc
        for proc in psutil.Process(runner.pid).children(recursive=True)
        if proc.ppid() != runner.pid and "forkserver" in " ".join(_cmdline(proc))
    ]
    if not scorers:
        raise LookupError(f"no reward scoring process under the task runner (pid {runner.pid})")
    proc = rng.choice(sorted(scorers, key=lambda p: p.pid))
    return Victim("reward_worker", proc.pid, runner.node_id, "reward scoring process")


def _cmdline(proc) -> list[str]:
    try:
        return proc.cmdline()
    except Exception:  # noqa: BLE001 - gone meanwhile
        return []


def find_victim(kind: str, rng: random.Random, head_id: str) -> Victim:
    """The process a ``kind`` fault kills now (``node``: the raylet of a worker node hosting part of the run)."""
    if kind == "rollout_server":
        return _actor_victim(kind, ROLLOUT_SERVER, rng)
    if kind in ("trainer_rank", "weight_sync"):
        return _actor_victim(kind, TRAINER_RANK, rng)
    if kind in ("rollouter", "agent_loop_worker"):
        return _actor_victim(kind, ROLLOUTER, rng)
    if kind == "reward_worker":
        return _reward_worker(rng)
    if kind == "node":
        hosted = [r for f in (ROLLOUT_SERVER, TRAINER_RANK) for r in actors_of(f)]
        nodes = sorted({r["Address"]["NodeID"] for r in hosted} - {head_id})
        if not nodes:
            raise LookupError("no worker node hosts a rollout server or a training rank")
        return Victim(kind, 0, rng.choice(nodes), "raylet")
    raise ValueError(f"unknown fault kind {kind!r}; known: {FAULT_KINDS}")


def kill(victim: Victim) -> None:
    os.kill(victim.pid, signal.SIGKILL)


def task_runner_log(logs_dir: Path) -> Path | None:
    """The task runner's stderr log in the head's session logs (its Python logging goes there)."""
    live = actors_of(TASK_RUNNER)
    if not live:
        return None
    matches = sorted(Path(logs_dir).glob(f"worker-*-{int(live[0]['Pid'])}.err"))
    return matches[-1] if matches else None


def wait_for_sync_start(logs_dir: Path, timeout_s: float = 120.0, poll_s: float = 0.01) -> bool:
    """Block until the task runner logs the start of a new weight sync; False when none came in ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    marker = SYNC_STARTED.encode()
    log, offset, tail = None, 0, b""
    while time.monotonic() < deadline:
        if log is None:
            log = task_runner_log(logs_dir)
            if log is None:
                time.sleep(0.2)
                continue
            offset = log.stat().st_size  # only a sync that starts from now on
        with log.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
        if marker in tail + chunk:
            return True
        offset += len(chunk)
        tail = (tail + chunk)[-len(marker) :]
        time.sleep(poll_s)
    return False
