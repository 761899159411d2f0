"""A shortened chaos soak (slow tier; the full one is ``bench/chaos.py``): a self-healing fully-async run on a local
2-node Ray cluster survives a SIGKILL of a training rank in the middle of a weight sync, of a whole worker node's
raylet, of the rollout server and of the rollouter, and ends with every prompt of its epoch consumed exactly once,
no sample trained on twice, and the replicas holding the trainer's final weights (equal checksums)."""

from __future__ import annotations

import os

import pytest

from bench.chaos import PASS_KEYS, checks, fault_outcomes, final_score, run_soak
from bench.chaos_cluster import SoakCluster
from bench.chaos_faults import Fault

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.multinode]

STEPS = 48
SCHEDULE = (Fault(10, "weight_sync"), Fault(20, "node"), Fault(30, "rollout_server"), Fault(38, "rollouter"))


@pytest.fixture(scope="module")
def soak_cluster():
    """A head and one worker node (raylets of their own) in place of the session's one-node cluster."""
    import ray
    from _ray_session import start_session_ray, test_runtime_env

    had_session_cluster = ray.is_initialized()
    os.environ.setdefault("RAY_worker_niceness", "0")
    cluster = SoakCluster(workers=1).start(runtime_env=test_runtime_env())
    try:
        yield cluster
    finally:
        cluster.shutdown()
        if had_session_cluster:
            start_session_ray()


def test_a_fully_async_run_survives_its_faults_losing_nothing(soak_cluster, tmp_path):
    result = run_soak(tmp_path, 0, STEPS, list(SCHEDULE), soak_cluster, save_freq=5)
    assert "summary" in result and not result.get("injector_error"), (result.get("error"), result.get("injector_error"))
    summary = result["summary"]
    assert summary["global_steps"] == STEPS and summary["restarts"] >= len(SCHEDULE), summary["restart_causes"]

    faults = fault_outcomes(result["faults"], result["events"], step_s=1.0)
    assert [f["kind"] for f in faults] == [f.kind for f in SCHEDULE]
    for fault in faults:  # each one restarted the run, which got past the step it had reached
        assert fault["restarts"] >= 1 and fault["recovered_s"] is not None, fault
        assert fault["steps_redone"] < 5, fault  # a checkpoint every 5 steps
    # the kill aimed at the weight sync hit it: the dead rank was named in the sync's weight transfer
    assert "send_weights" in summary["restart_causes"][0], summary["restart_causes"][0]

    score, _ = final_score(tmp_path)
    verdict = checks(summary, tmp_path, STEPS, reference_final=[score], final_score=score)
    failed = [key for key in PASS_KEYS if not verdict[key]]
    assert not failed, (failed, verdict)
    assert verdict["lineage"]["samples"] == STEPS * 8 * 8
