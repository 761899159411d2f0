"""bench/timeline.py: calls sorted by kind, overlapping calls counted once, the steady window and efficiency."""

import json

import pytest

from bench.timeline import GENERATION, OTHER, TRAINING, WAITING, WEIGHT_SYNC, analyse, read_calls


def _event(process: str, qualified: str, start_s: float, seconds: float) -> dict:
    return {
        "cat": f"task::{qualified}",
        "name": qualified.rsplit(".", 1)[-1],
        "pid": "node",
        "tid": process,
        "ts": start_s * 1e6,
        "dur": seconds * 1e6,
        "ph": "X",
    }


@pytest.fixture
def trace(tmp_path):
    events = [
        _event("trainer", "Colocated_actor_abc_rank0:Colocated_actor.__init__", 0.0, 1.0),
        _event("trainer", "Colocated_actor.actor_update_actor", 1.0, 2.0),  # warm-up update
        _event("trainer", "Colocated_actor.actor_update_actor", 4.0, 2.0),
        _event("trainer", "Colocated_actor.actor_send_weights", 6.0, 1.0),
        _event("trainer", "Colocated_actor.actor_update_actor", 8.0, 2.0),
        _event("rollout", "HFRolloutServer.generate_batch", 4.0, 3.0),
        _event("rollout", "HFRolloutServer.generate_batch", 5.0, 3.0),  # overlaps the one before
        _event("rollout", "HFRolloutServer.update_weights", 8.0, 1.0),
        _event("coordinator", "TaskRunner.run", 0.0, 10.0),
        _event("queue", "MessageQueue.get", 3.0, 5.0),
        {"cat": "submit_task", "name": "submit_task", "pid": "node", "tid": "driver", "ts": 0, "dur": 1, "ph": "X"},
    ]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(events))
    return path


def test_calls_are_sorted_into_kinds(trace):
    kinds = {(c.process, c.method): c.kind for c in read_calls(trace)}
    assert kinds[("trainer", "actor_update_actor")] == TRAINING
    assert kinds[("trainer", "actor_send_weights")] == WEIGHT_SYNC
    assert kinds[("rollout", "generate_batch")] == GENERATION
    assert kinds[("trainer", "__init__")] == OTHER
    assert kinds[("queue", "get")] == WAITING


def test_busy_fractions_and_efficiency_over_the_steady_window(trace, tmp_path):
    timeline = analyse(trace, skip_updates=1)
    lanes, summary = timeline.lanes, timeline.summary
    assert [lane.process for lane in lanes] == ["trainer", "rollout"]  # coordinators and the queue left out
    assert summary["window"] == [4.0, 10.0]
    trainer, rollout = summary["processes"]
    assert trainer["training"] == pytest.approx(4 / 6) and trainer["busy"] == pytest.approx(5 / 6)
    assert rollout["generation"] == pytest.approx(4 / 6)  # 4..8, the overlap counted once
    assert summary["pipeline_efficiency"] == pytest.approx((4 + 4) / (2 * 6))
    assert summary["trainer_waiting_for_samples"] == pytest.approx(4 / 6)  # the get of 3..8, within 4..10
    png = timeline.draw(tmp_path / "timeline.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_trace_without_enough_updates_is_refused(trace):
    with pytest.raises(ValueError, match="3 updates; cannot skip 3"):
        analyse(trace, skip_updates=3)
