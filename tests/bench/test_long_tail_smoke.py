"""bench/long_tail.py end to end at toy size: a fully-async verl run on the long-tail workload, with every figure
the full benchmark reports (throughput, rewards, per-sample lengths, the timeline's efficiency and the PNGs)."""

import json

import pytest

from bench.long_tail import main


def test_long_tail_smoke_reports_lengths_throughput_and_the_timeline(tmp_path):
    payload = main(
        [
            "--only",
            "verl_fa",
            "--seeds",
            "0",
            "--steps",
            "3",
            "--prompts",
            "2",
            "--n",
            "2",
            "--response-length",
            "24",
            "--warmup",
            "1",
            "--reward-window",
            "1",
            "--out-dir",
            str(tmp_path),
        ]
    )
    summary = payload["summary"]["verl_fa"]
    assert summary["samples_per_s"] > 0 and summary["updates"] == 3
    lengths = summary["lengths_all"]
    assert lengths["count"] == 3 * 2 * 2  # every sample of every step, read back from the generation dumps
    assert 1 <= lengths["min"] <= lengths["median"] <= lengths["p90"] <= lengths["max"] <= 24
    timeline = payload["timelines"]["verl_fa"]
    assert 0 < timeline["pipeline_efficiency"] <= 1
    assert {p["actor_class"] for p in timeline["processes"]} >= {"HFRolloutServer"}
    for png in (timeline["png"], payload["length_histogram"]):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    # every process of the run, the Ray workers under the driver's daemons and the controller side too
    cores = timeline["cores_busy"]
    assert {"HFRolloutServer", "Rollouter", "raylet"} <= set(cores), cores
    assert min(cores.values()) >= 0
    assert cores["total"] == pytest.approx(sum(v for k, v in cores.items() if k != "total"))
    written = json.loads((tmp_path / "long_tail.json").read_text())
    assert written["summary"]["verl_fa"]["lengths_all"] == lengths
    markdown = (tmp_path / "long_tail.md").read_text()
    assert "verl fully async" in markdown and "Cores busy per process" in markdown


def test_the_verdict_takes_the_fastest_layout_that_learns_as_much():
    """A faster layout whose reward falls below every seed of the other side cannot meet an at-equal-reward
    target; the fastest layout that learns as much is compared first, the fastest of all beside it."""
    from bench.long_tail import compare, fastest_at_equal_reward

    def side(samples_per_s: float, rewards: list[float]) -> dict:
        return {
            "samples_per_s": samples_per_s,
            "samples_per_s_per_seed": [samples_per_s] * len(rewards),
            "reward_last": sum(rewards) / len(rewards),
            "reward_last_per_seed": rewards,
        }

    summary = {
        "trl": side(100.0, [0.015, 0.017]),
        "fast_but_worse": side(250.0, [0.013, 0.014]),
        "equal": side(190.0, [0.016, 0.016]),
        "slow": side(120.0, [0.020, 0.020]),
    }
    chosen = fastest_at_equal_reward(summary, ["fast_but_worse", "equal", "slow"], "trl")
    assert chosen == ["equal", "fast_but_worse"]
    first, second = (compare(summary, key, "trl") for key in chosen)
    assert first["equal_reward"] and first["ratio"] == 1.9
    assert not second["equal_reward"] and second["ratio"] == 2.5
