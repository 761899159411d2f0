"""bench/long_tail.py end to end at toy size: a fully-async verl run on the long-tail workload, with every figure
the full benchmark reports (time to reward, throughput, rewards, per-sample lengths, the timeline's efficiency and
the PNGs)."""

import json
import math

import pytest

from bench.long_tail import main


def test_long_tail_smoke_reports_time_to_reward_lengths_and_the_timeline(tmp_path):
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
            "--warm-steps",
            "2",
            "--warmup",
            "1",
            "--reward-window",
            "1",
            "--smooth",
            "1",
            "--out-dir",
            str(tmp_path),
        ]
    )
    summary = payload["summary"]["verl_fa"]
    assert summary["samples_per_s"] > 0 and summary["updates"] == 3
    times = payload["raw"]["verl_fa"][0]["reward_times"]
    assert len(times) == 3 and 0 < times[0] <= times[1] <= times[2] <= payload["raw"]["verl_fa"][0]["wall_s"]
    # the best side reaches every level below its own final reward, at one of its steps
    level = summary["time_to_level"]["50%"]
    assert level["median"] in times and level["level"] == pytest.approx(0.5 * summary["reward_last"])
    lengths = summary["lengths_all"]
    assert lengths["count"] == 3 * 2 * 2  # every sample of every step, read back from the generation dumps
    assert 1 <= lengths["min"] <= lengths["median"] <= lengths["p90"] <= lengths["max"] <= 24
    timeline = payload["timelines"]["verl_fa"]
    assert 0 < timeline["pipeline_efficiency"] <= 1
    assert {p["actor_class"] for p in timeline["processes"]} >= {"HFRolloutServer"}
    for png in (timeline["png"], payload["length_histogram"], payload["reward_curves"]):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    # every process of the run, the Ray workers under the driver's daemons and the controller side too
    cores = timeline["cores_busy"]
    assert {"HFRolloutServer", "Rollouter", "raylet"} <= set(cores), cores
    assert min(cores.values()) >= 0
    assert cores["total"] == pytest.approx(sum(v for k, v in cores.items() if k != "total"))
    assert all("actor/pg_clipfrac" in step for step in payload["raw"]["verl_fa"][0]["off_policy"])
    written = json.loads((tmp_path / "long_tail.json").read_text())
    assert written["summary"]["verl_fa"]["lengths_all"] == lengths
    markdown = (tmp_path / "long_tail.md").read_text()
    assert "verl fully async" in markdown and "Cores busy per process" in markdown and "s to 80%" in markdown


def test_time_to_reward_reads_the_running_mean_and_compares_medians():
    """A level counts as reached at the first step whose running mean reaches it; a seed that never gets there is
    infinitely slow, so a median over three seeds survives one such seed but not two."""
    from bench.long_tail import compare_times, time_to_reward, times_to_levels

    run = {"reward": [0.1, 0.5, 0.2, 0.6, 0.7], "reward_times": [10.0, 20.0, 30.0, 40.0, 50.0]}
    assert time_to_reward(run, 0.5, smooth=1) == 20.0
    assert time_to_reward(run, 0.5, smooth=2) == 50.0  # running means 0.1, 0.3, 0.35, 0.4, 0.65
    assert math.isinf(time_to_reward(run, 0.9, smooth=1))
    never = {"reward": [0.1, 0.1], "reward_times": [5.0, 6.0]}
    fast = {"reward": [0.6], "reward_times": [8.0]}
    ours = times_to_levels([fast, run, never], {"80%": 0.5}, smooth=1)["80%"]
    assert ours["median"] == 20.0 and ours["per_seed"][2] == math.inf
    theirs = times_to_levels([never, never, run], {"80%": 0.5}, smooth=1)["80%"]
    assert math.isinf(theirs["median"])
    their_level = {"median": 50.0, "median_after_first_step": 25.0}
    summary = {"a": {"time_to_level": {"80%": ours}}, "b": {"time_to_level": {"80%": their_level}}}
    verdict = compare_times(summary, "a", "b", "80%", target=0.5)
    assert verdict["ratio"] == pytest.approx(0.4) and verdict["met"]
    # setup left out: ours 20 s from launch is 10 s after its first scored step (at 10 s)
    assert verdict["ratio_after_first_step"] == pytest.approx(ours["median_after_first_step"] / 25.0)
    summary["b"]["time_to_level"]["80%"]["median"] = 30.0
    assert not compare_times(summary, "a", "b", "80%", target=0.5)["met"]


def test_results_of_separate_runs_merge_by_seed_and_refuse_another_shape():
    """Seeds run one at a time (when the machine is free) report as one run: runs pooled in seed order, the lowest
    seed's timeline kept; runs of another shape (here more updates) are refused by name."""
    from bench.long_tail import merge_results

    def result(seed: int, steps: int = 80) -> dict:
        return {
            "config": {"steps": steps, "prompts": 16, "seeds": [seed]},
            "variants": {"verl_fa_s2": {"label": "fa"}},
            "raw": {"verl_fa_s2": [{"seed": seed, "reward": [seed]}]},
            "timelines": {"verl_fa_s2": {"seed": seed}},
            "trl_version": None,
        }

    merged = merge_results([result(2), result(0), result(1)])
    assert [run["seed"] for run in merged["raw"]["verl_fa_s2"]] == [0, 1, 2]
    assert merged["timelines"]["verl_fa_s2"] == {"seed": 0} and merged["config"]["seeds"] == [0, 1, 2]
    with pytest.raises(ValueError, match="steps"):
        merge_results([result(0), result(1, steps=40)])
