"""Time to reward on a long-tailed task: TRL against our layouts, and fully async against sync, on 2 cores.

Workload: the synthetic ``long_tail_digit`` task (``"7x37:"`` -> 37 sevens; the lengths asked for are log-uniform in
2..256) from a warm start (``verl.utils.warm_start``): the digits-only tiny checkpoint after a short supervised run
on the asked lengths written in a random digit. So the policy decides every length and its lengths are long-tailed
from the first step (median about 20 tokens, some at the 256-token limit), while which digit to write is left to RL:
the reward (``verl.utils.reward_score.long_tail``, matching characters over the longer of answer and response)
starts near 0.06 and rises towards the length accuracy of the warm start as the policy learns to copy the digit.

Every side trains from the same checkpoint, parquet rows, reward function, group size, prompts per step, sampling
(temperature 1, no top-k/top-p, stop at EOS or the limit), optimizer and number of updates, with 2 cores in all:

- TRL ``GRPOTrainer``: one process with two torch threads, or two DDP processes (``bench/trl_comparison.py``'s venv);
- verl sync: ``main_ppo``, 2 colocated actor+rollout processes;
- verl one-step-off: 1 trainer + 1 rollout process (bypass mode: the rollout's log-probs are the old ones);
- verl fully async: 1 trainer + 1 rollout process, staleness 1 and 2, partial rollout, weights every step; at
  staleness 2 also with the REINFORCE loss weighted by truncated token ratios (``loss_type=reinforce``,
  ``rollout_is=token``) instead of PPO-clip against the generating policy, and with weights every 2 updates.

The headline is the wall time to reward: each step's mean reward is placed at the moment it was known (verl: when
the step's generation dump was written, after scoring and before the update; TRL: when its reward function
returned), counted from the launch of the run's process, so setup (Ray, model loading) is included. A level counts
as reached at the first step whose running mean over ``--smooth`` steps reaches it; the levels are fractions
(``--levels``) of the best final reward of the sides run on every seed, and the time is the median over ``--seeds``
(a seed that never gets there counts as infinitely slow). All curves are drawn against wall time in one PNG.

Also reported per variant (pooled over seeds): samples/s over the steps after ``--warmup``, reward of the first and
last ``--reward-window`` steps, and the response lengths of every sample (min / median / p90 / max, first step and
whole run) with their histogram. The verl runs of the first seed record Ray's timeline; ``bench/timeline.py`` turns
each into a PNG and a pipeline efficiency, and ``bench/process_cpu.py`` says how many cores every process kept busy.

    python bench/long_tail.py                       # writes bench/results/long_tail.{json,md} and PNGs
    python bench/long_tail.py --seeds 0 --only verl_sync verl_fa   # a quicker look
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS_DIR, markdown_table, write_results  # noqa: E402
from bench.process_cpu import cores_busy  # noqa: E402
from bench.timeline import analyse  # noqa: E402
from bench.trl_comparison import Variant, ensure_trl, run_ours, run_trl_child  # noqa: E402

NAME = "long_tail"
TASK = "long_tail_digit"
# fully async's time to the top level, as a fraction of the other side's at most
TARGET_VS_TRL = 1 / 2
TARGET_ASYNC_VS_SYNC = 2 / 3
TARGET_EFFICIENCY = 0.85
TRL_DDP = "trl_2p1t"
RUN_SHAPE = ("steps", "prompts", "n", "response_length", "micro_batch", "seeds", "lr", "warm_steps")
BYPASS = ("algorithm.rollout_correction.bypass_mode=true", "rollout.calculate_log_probs=true")
# Stale samples weighted by their truncated token ratio instead of PPO-clipped against the policy that generated them
IS_REINFORCE = ("algorithm.rollout_correction.loss_type=reinforce", "algorithm.rollout_correction.rollout_is=token")

VARIANTS = (
    Variant("trl_1p2t", "trl", 1, 2, "TRL GRPOTrainer, 1 process x 2 threads"),
    Variant("trl_2p1t", "trl", 2, 1, "TRL GRPOTrainer, 2 processes (torchrun DDP) x 1 thread"),
    Variant("verl_sync", "verl", 2, 1, "verl main_ppo, 2 colocated processes"),
    Variant("verl_osp", "verl", 2, 1, "verl one-step-off, 1 trainer + 1 rollout process", "one_step_off", BYPASS),
    Variant(
        "verl_fa",
        "verl",
        2,
        1,
        "verl fully async (staleness 1), 1 trainer + 1 rollout process",
        "fully_async",
        (*BYPASS, "async_training.staleness_threshold=1.0"),
    ),
    Variant(
        "verl_fa_s2",
        "verl",
        2,
        1,
        "verl fully async (staleness 2), 1 trainer + 1 rollout process",
        "fully_async",
        (*BYPASS, "async_training.staleness_threshold=2.0"),
    ),
    Variant(
        "verl_fa_s2_is",
        "verl",
        2,
        1,
        "verl fully async (staleness 2, REINFORCE with token IS), 1 trainer + 1 rollout process",
        "fully_async",
        (*BYPASS, "async_training.staleness_threshold=2.0", *IS_REINFORCE),
    ),
    Variant(
        "verl_fa_s2_is_t2",
        "verl",
        2,
        1,
        "verl fully async (staleness 2, REINFORCE with token IS, weights every 2 updates), 1 trainer + 1 rollout "
        "process",
        "fully_async",
        (
            *BYPASS,
            "async_training.staleness_threshold=2.0",
            "async_training.trigger_parameter_sync_step=2",
            *IS_REINFORCE,
        ),
    ),
)
# docs/performance.md section 11's pipeline levers, each alone on the staleness-2 PPO-clip layout
STALENESS_2 = (*BYPASS, "async_training.staleness_threshold=2.0")
LEVERS = (
    Variant(
        "verl_fa_s2_keep",
        "verl",
        2,
        1,
        "verl fully async (staleness 2), requests kept in the engine through a weight sync",
        "fully_async",
        (*STALENESS_2, "async_training.keep_requests_through_sync=true"),
    ),
    Variant(
        "verl_fa_s2_trainer_gen",
        "verl",
        2,
        1,
        "verl fully async (staleness 2), the trainer's process generates while it waits",
        "fully_async",
        (*STALENESS_2, "async_training.trainer_generates_while_waiting=true"),
    ),
    Variant(
        "verl_fa_s2_per_group",
        "verl",
        2,
        1,
        "verl fully async (staleness 2), one queue call and object-store put per group (not per burst)",
        "fully_async",
        (*STALENESS_2, "async_training.coalesce_queue_puts=false"),
    ),
)
VARIANTS = (*VARIANTS, *LEVERS)
FULLY_ASYNC = ("verl_fa", "verl_fa_s2", "verl_fa_s2_is", "verl_fa_s2_is_t2", *(v.key for v in LEVERS))


def prepare(args: argparse.Namespace) -> None:
    """The warm-start checkpoint and the task's parquet rows, built once under the cache folder."""
    from verl.trainer.demo import prepare_task_data
    from verl.utils.synthetic_tasks import LONG_TAIL_CHARSET
    from verl.utils.warm_start import WarmStartConfig, warm_start_path

    args.data = str(prepare_task_data(TASK)["train"])
    args.model_dir = str(warm_start_path(WarmStartConfig(TASK, LONG_TAIL_CHARSET, steps=args.warm_steps)))


def length_stats(lengths: list[int]) -> dict[str, float]:
    ordered = sorted(lengths)
    return {
        "count": len(ordered),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def reward_curve(run: dict, smooth: int) -> list[tuple[float, float]]:
    """(seconds from launch, running mean of the last ``smooth`` steps' rewards) at every step of one run."""
    rewards, times = run["reward"], run["reward_times"]
    count = min(len(rewards), len(times))
    return [(times[i], statistics.fmean(rewards[max(0, i - smooth + 1) : i + 1])) for i in range(count)]


def time_to_reward(run: dict, level: float, smooth: int) -> float:
    """Seconds from launch until the running mean reward first reaches ``level``; infinity if it never does."""
    return next((t for t, reward in reward_curve(run, smooth) if reward >= level), math.inf)


def summarize(runs: list[dict], samples_per_step: int, warmup: int, window: int) -> dict[str, Any]:
    """Throughput pooled over seeds, per-seed throughput, rewards and length statistics of one variant."""
    per_seed = [samples_per_step * len(r["step_seconds"][warmup:]) / sum(r["step_seconds"][warmup:]) for r in runs]
    steady = sum(len(r["step_seconds"][warmup:]) for r in runs)
    first_step = [n for r in runs for n in r["lengths_per_step"][0]]
    every = [n for r in runs for step in r["lengths_per_step"] for n in step]
    last = [n for r in runs for step in r["lengths_per_step"][-window:] for n in step]
    return {
        "samples_per_s": samples_per_step * steady / sum(sum(r["step_seconds"][warmup:]) for r in runs),
        "samples_per_s_per_seed": per_seed,
        "reward_first": statistics.fmean(statistics.fmean(r["reward"][:window]) for r in runs),
        "reward_last": statistics.fmean(statistics.fmean(r["reward"][-window:]) for r in runs),
        "reward_last_per_seed": [statistics.fmean(r["reward"][-window:]) for r in runs],
        # the warm start's own reward: step 1's samples are generated before any update
        "reward_start": statistics.fmean(r["reward"][0] for r in runs),
        "rise_per_seed": [statistics.fmean(r["reward"][-window:]) / max(r["reward"][0], 1e-9) for r in runs],
        "first_reward_s": statistics.median(r["reward_times"][0] for r in runs),
        "lengths_first_step": length_stats(first_step),
        "lengths_all": length_stats(every),
        "lengths_last": length_stats(last),
        "wall_s": statistics.fmean(r["wall_s"] for r in runs),
        "updates": len(runs[0]["step_seconds"]),
    }


def reward_levels(summary: dict[str, dict], fractions: list[float]) -> dict[str, float]:
    """The fixed reward levels: ``fractions`` of the best final reward (seed mean of the last steps) of ``summary``'s
    sides."""
    best = max(s["reward_last"] for s in summary.values())
    return {f"{fraction:.0%}": fraction * best for fraction in fractions}


def times_to_levels(runs: list[dict], levels: dict[str, float], smooth: int) -> dict[str, dict[str, Any]]:
    """Per level: every seed's time to reach it and their median (infinity counts as slowest)."""
    out = {}
    for name, level in levels.items():
        per_seed = [time_to_reward(run, level, smooth) for run in runs]
        training = [t - run["reward_times"][0] for t, run in zip(per_seed, runs)]  # setup left out
        out[name] = {
            "level": level,
            "per_seed": per_seed,
            "median": statistics.median(per_seed),
            "median_after_first_step": statistics.median(training),
        }
    return out


def _json_seconds(value: float) -> float | None:
    return None if math.isinf(value) else value


def compare_times(summary: dict[str, dict], ours: str, theirs: str, level: str, target: float) -> dict[str, Any]:
    """``ours``'s median time to ``level`` as a fraction of ``theirs``'s; met when at most ``target``."""
    mine, other = (summary[k]["time_to_level"][level]["median"] for k in (ours, theirs))
    ratio = _ratio(mine, other)
    training = [summary[k]["time_to_level"][level]["median_after_first_step"] for k in (ours, theirs)]
    return {
        # setup left out: from each side's first scored step
        "ratio_after_first_step": _json_seconds(_ratio(*training)),
        "ours": ours,
        "theirs": theirs,
        "level": level,
        "seconds_ours": _json_seconds(mine),
        "seconds_theirs": _json_seconds(other),
        "ratio": _json_seconds(ratio),
        "target": target,
        "met": math.isfinite(ratio) and ratio <= target,
    }


def _ratio(mine: float, other: float) -> float:
    return mine / other if math.isfinite(other) and other > 0 else (0.0 if math.isfinite(mine) else math.inf)


def fastest_to(summary: dict[str, dict], candidates: list[str], level: str) -> str:
    """The candidate with the shortest median time to ``level``."""
    return min(candidates, key=lambda k: summary[k]["time_to_level"][level]["median"])


def draw_rewards(raw: dict[str, list[dict]], keys: list[str], levels: dict[str, float], smooth: int, out: Path) -> Path:
    """Reward (running mean over ``smooth`` steps) against seconds from launch: every variant and seed, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, key in enumerate(keys):
        for seed_index, run in enumerate(raw[key]):
            times, rewards = zip(*reward_curve(run, smooth)) if run["reward"] else ((), ())
            label = key if seed_index == 0 else None
            ax.plot(times, rewards, color=colors[index % len(colors)], lw=1.2, alpha=0.8, label=label)
    for (name, level), style in zip(levels.items(), ("--", ":", "-.")):
        ax.axhline(level, color="grey", ls=style, lw=0.8, label=f"{name} of the best final reward")
    ax.set_xlim(left=0)  # the blank start is each side's setup
    ax.set_xlabel("seconds from launch (setup included)")
    ax.set_ylabel(f"reward (running mean of {smooth} steps)")
    ax.set_title("long_tail_digit: reward against wall time, every seed", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def draw_lengths(raw: dict[str, list[dict]], keys: list[str], window: int, out: Path) -> Path:
    """Histogram of response lengths: every variant's first step, and its last ``window`` steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=False)
    bins = list(range(0, 264, 8))
    for ax, title, pick in (
        (axes[0], "first step", lambda run: run["lengths_per_step"][:1]),
        (axes[1], f"last {window} steps", lambda run: run["lengths_per_step"][-window:]),
    ):
        for key in keys:
            lengths = [n for run in raw[key] for step in pick(run) for n in step]
            ax.hist(lengths, bins=bins, histtype="step", density=True, label=key)
        ax.set_title(f"response length (tokens), {title}", fontsize=10)
        ax.set_yscale("log")
        ax.set_xlabel("tokens")
    axes[0].set_ylabel("share of samples (log)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _top(cores: dict[str, float], count: int = 6) -> list[tuple[str, float]]:
    """The ``count`` process names that kept the most cores busy (``cores_busy`` order), the total left out."""
    return [(name, value) for name, value in cores.items() if name != "total"][:count]


def _seconds(value: float | None) -> str:
    return "not reached" if value is None or math.isinf(value) else f"{value:.0f}"


def render(
    args: argparse.Namespace, summary: dict, comparisons: list[dict], timelines: dict, labels: dict, levels: dict
) -> str:
    level_names = list(levels)
    ttr_rows = [
        [
            labels[key],
            *(
                f"{_seconds(s['time_to_level'][name]['median'])} "
                f"({', '.join(_seconds(t) for t in s['time_to_level'][name]['per_seed'])}; "
                f"{_seconds(s['time_to_level'][name]['median_after_first_step'])} after step 1)"
                for name in level_names
            ),
            s["first_reward_s"],
            s["reward_start"],
            s["reward_first"],
            s["reward_last"],
            f"{s['reward_last'] / max(s['reward_start'], 1e-9):.1f}x "
            f"({', '.join(f'{r:.1f}' for r in s['rise_per_seed'])})",
        ]
        for key, s in summary.items()
    ]
    ttr_table = markdown_table(
        [
            "variant",
            *(
                f"s to {name} = {levels[name]:.3f} (per seed; median after the first step's reward)"
                for name in level_names
            ),
            "s to first step's reward",
            "reward, step 1 (the warm start)",
            f"reward, first {args.reward_window} steps",
            f"reward, last {args.reward_window} steps",
            f"rise: last {args.reward_window} / step 1 (per seed)",
        ],
        ttr_rows,
    )
    rows = []
    for key, s in summary.items():
        first, every, last = s["lengths_first_step"], s["lengths_all"], s["lengths_last"]
        rows.append(
            [
                labels[key],
                s["samples_per_s"],
                f"{min(s['samples_per_s_per_seed']):.1f}-{max(s['samples_per_s_per_seed']):.1f}",
                f"{first['min']}/{first['median']:g}/{first['p90']}/{first['max']}",
                f"{every['min']}/{every['median']:g}/{every['p90']}/{every['max']}",
                f"{last['min']}/{last['median']:g}/{last['p90']}/{last['max']}",
                timelines.get(key, {}).get("pipeline_efficiency"),
            ]
        )
    table = markdown_table(
        [
            "variant",
            "samples/s",
            "per seed",
            "lengths step 1 (min/med/p90/max)",
            "lengths all steps",
            f"lengths last {args.reward_window} steps",
            "pipeline efficiency",
        ],
        rows,
    )
    lines = [
        f"GRPO on the {TASK} task from a shared warm start (tiny digits-only model), CPU with 2 cores per side; "
        f"{args.prompts} prompts x {args.n} samples per step, up to {args.response_length} response tokens, "
        f"{args.steps} updates, seeds {', '.join(map(str, args.seeds))}. Time to reward: seconds from the launch of "
        f"the run (setup included) until the running mean of {args.smooth} steps' rewards reaches the level, median "
        f"over seeds; levels are {', '.join(level_names)} of the best final reward of the sides run on every seed "
        "(a variant run on fewer seeds is reported, but sets no level and stands in no comparison). Curves: "
        f"{NAME}_rewards.png.",
        "",
        ttr_table,
        "",
    ]
    for c in comparisons:
        lines.append(
            f"- {labels[c['ours']]} reaches {c['level']} in {_seconds(c['seconds_ours'])} s against "
            f"{_seconds(c['seconds_theirs'])} s for {labels[c['theirs']]}: "
            f"**{_seconds_ratio(c['ratio'])}** of its time, {'meets' if c['met'] else 'misses'} the "
            f"<= {c['target']:.2f} target; counted from each side's first scored step (setup left out) "
            f"{_seconds_ratio(c['ratio_after_first_step'])}."
        )
    lines += [
        "",
        f"Throughput (steps after {args.warmup} warm-up steps, pooled over seeds), response lengths of every sample "
        f"(histogram: {NAME}_lengths.png) and pipeline efficiency from the first seed's Ray timeline "
        "(bench/timeline.py); verl's updates in micro-batches of "
        f"{args.micro_batch} samples cut in length order, TRL's in one:",
        "",
        table,
        "",
    ]
    cpu_rows = [
        [
            labels[key],
            t["cores_busy"]["total"],
            ", ".join(f"{name} {value:.2f}" for name, value in _top(t["cores_busy"])),
        ]
        for key, t in timelines.items()
        if "cores_busy" in t
    ]
    if cpu_rows:
        lines += [
            "Cores busy per process over the same steady window (first seed; CPU time of every process of the run "
            "sampled from /proc every 0.25 s by bench/process_cpu.py, processes of one name summed; the machine "
            "has 2):",
            "",
            markdown_table(["variant", "all processes", "largest"], cpu_rows),
            "",
        ]
    return "\n".join(lines)


def _seconds_ratio(ratio: float | None) -> str:
    return "never" if ratio is None else f"{ratio:.2f}"


def merge_results(results: list[dict]) -> dict:
    """One results payload from several runs of this bench (say, one per seed, each taken when the machine was free):
    runs of a variant are pooled in seed order, the timeline kept is that of the lowest seed; the runs must share
    their shape (``RUN_SHAPE`` but the seeds)."""
    first = results[0]
    shape = [key for key in RUN_SHAPE if key != "seeds"]
    for other in results[1:]:
        differ = [key for key in shape if other["config"].get(key) != first["config"].get(key)]
        if differ:
            raise ValueError(f"--from-json: the results differ in {differ}; only runs of one shape can be merged")
    raw: dict[str, list[dict]] = {}
    timelines: dict[str, tuple[int, dict]] = {}
    variants: dict[str, dict] = {}
    for result in results:
        variants.update(result["variants"])
        for key, runs in result["raw"].items():
            raw.setdefault(key, []).extend(runs)
        lowest = min(result["config"]["seeds"])
        for key, timeline in result["timelines"].items():
            if key not in timelines or lowest < timelines[key][0]:
                timelines[key] = (lowest, timeline)
    for runs in raw.values():
        runs.sort(key=lambda run: run["seed"])
    seeds = sorted({run["seed"] for runs in raw.values() for run in runs})
    trl_version = next((r["trl_version"] for r in results if r.get("trl_version")), None)
    return {
        "config": {**first["config"], "seeds": seeds},
        "variants": variants,
        "raw": raw,
        "timelines": {key: timeline for key, (_, timeline) in timelines.items()},
        "trl_version": trl_version,
    }


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80, help="updates on each side")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="group size")
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=16,
        help="verl's micro-batch per process (cut in length order); TRL trains its batch in one",
    )
    parser.add_argument(
        "--verl-override", dest="verl_overrides", action="append", default=[], help="extra Hydra override, verl sides"
    )
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate of every side")
    parser.add_argument("--warm-steps", type=int, default=300, help="supervised steps of the shared warm start")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reward-window", type=int, default=5)
    parser.add_argument("--smooth", type=int, default=3, help="steps in the running mean a level is read from")
    parser.add_argument("--levels", type=float, nargs="+", default=[0.5, 0.8], help="fractions of the best reward")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", choices=[v.key for v in VARIANTS], help="run only these variants")
    parser.add_argument("--trl-spec", default="trl", help="pip requirement installed into bench/.venv-trl")
    parser.add_argument("--out-dir", type=Path, default=None, help="results folder (default bench/results)")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        help="report these results files' runs again, merged (e.g. one file per seed or per variant)",
    )
    args = parser.parse_args(argv)
    if args.steps <= max(args.warmup, args.reward_window):
        parser.error(f"--steps ({args.steps}) must exceed --warmup and --reward-window")
    out_dir = args.out_dir or RESULTS_DIR
    if args.from_json is not None:  # report finished runs again (their raw runs and timelines), running nothing
        previous = merge_results([json.loads(path.read_text()) for path in args.from_json])
        for key in RUN_SHAPE:  # what the runs were; the analysis settings stay the command line's
            setattr(args, key, previous["config"].get(key, getattr(args, key)))
        variants = [v for v in VARIANTS if v.key in previous["raw"]]
        labels = {key: value["label"] for key, value in previous["variants"].items()}
        return report(args, out_dir, variants, labels, previous["trl_version"], previous["raw"], previous["timelines"])
    variants = [v for v in VARIANTS if not args.only or v.key in args.only]
    trl_version = None
    if any(v.trainer == "trl" for v in variants):
        try:
            trl_version = ensure_trl(args.trl_spec)
        except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
            print(f"TRL left out: it could not be installed into its venv ({exc})")
            variants = [v for v in variants if v.trainer != "trl"]
    prepare(args)
    labels = {v.key: v.label.replace("TRL GRPOTrainer", f"TRL GRPOTrainer {trl_version}") for v in VARIANTS}

    raw: dict[str, list[dict]] = {v.key: [] for v in variants}
    timelines: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench_long_tail_") as tmp:
        for seed in args.seeds:
            for variant in variants:
                if variant.trainer == "trl":
                    run = run_trl_child(args, variant, seed)
                else:
                    trace = Path(tmp) / f"{variant.key}_timeline.json" if seed == args.seeds[0] else None
                    run = run_ours(args, variant, seed, timeline=trace, lengths=True, sample_cpu=trace is not None)
                    sampler = run.pop("cpu_sampler", None)
                    if trace is not None:
                        timeline = analyse(trace, skip_updates=args.warmup)
                        png = timeline.draw(
                            out_dir / f"{NAME}_timeline_{variant.key}.png", f"{labels[variant.key]}, seed {seed}"
                        )
                        cpu = cores_busy(sampler, *timeline.summary["window_epoch_s"])
                        timelines[variant.key] = {**timeline.summary, "png": png.name, "cores_busy": cpu}
                run["seed"] = seed
                raw[variant.key].append(run)
                print(
                    f"seed {seed} {variant.key}: wall {run['wall_s']:.0f} s, rewards "
                    f"{[round(r, 3) for r in run['reward']]} at {[round(t) for t in run['reward_times']]} s",
                    flush=True,
                )
    return report(args, out_dir, variants, labels, trl_version, raw, timelines)


def report(
    args: argparse.Namespace,
    out_dir: Path,
    variants: list[Variant],
    labels: dict[str, str],
    trl_version: str | None,
    raw: dict[str, list[dict]],
    timelines: dict[str, dict],
) -> dict:
    """Summaries, time to reward, the verdicts, the PNGs and the results files of finished runs."""
    samples = args.prompts * args.n
    summary = {key: summarize(runs, samples, args.warmup, args.reward_window) for key, runs in raw.items()}
    # a variant run on fewer seeds (a lever probed on one) neither sets the levels nor stands in the comparisons: one
    # lucky seed's final reward would raise the bar for everyone
    most_seeds = max(len(runs) for runs in raw.values())
    headline = {key: s for key, s in summary.items() if len(raw[key]) == most_seeds}
    levels = reward_levels(headline, args.levels)
    for key, runs in raw.items():
        summary[key]["time_to_level"] = times_to_levels(runs, levels, args.smooth)
    keys = list(summary)
    top = list(levels)[-1]
    comparisons = []
    fully_async = [k for k in FULLY_ASYNC if k in headline]
    if fully_async:
        fastest = fastest_to(summary, fully_async, top)
        trl = TRL_DDP if TRL_DDP in summary else next((k for k in keys if k.startswith("trl")), None)
        for theirs, target in ((trl, TARGET_VS_TRL), ("verl_sync", TARGET_ASYNC_VS_SYNC)):
            if theirs in summary:
                comparisons.append(compare_times(summary, fastest, theirs, top, target))
    histogram = draw_lengths(raw, keys, args.reward_window, out_dir / f"{NAME}_lengths.png")
    curves = draw_rewards(raw, keys, levels, args.smooth, out_dir / f"{NAME}_rewards.png")
    markdown = render(args, summary, comparisons, timelines, labels, levels)
    print(markdown)
    for s in summary.values():
        for entry in s["time_to_level"].values():
            entry["per_seed"] = [_json_seconds(t) for t in entry["per_seed"]]
            entry["median"] = _json_seconds(entry["median"])
            entry["median_after_first_step"] = _json_seconds(entry["median_after_first_step"])
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "task": TASK,
        "trl_version": trl_version,
        "targets": {"vs_trl": TARGET_VS_TRL, "async_vs_sync": TARGET_ASYNC_VS_SYNC, "efficiency": TARGET_EFFICIENCY},
        "levels": levels,
        "variants": {v.key: {"label": labels[v.key], "mode": v.mode, "overrides": v.overrides} for v in variants},
        "comparisons": comparisons,
        "timelines": timelines,
        "summary": summary,
        "length_histogram": histogram.name,
        "reward_curves": curves.name,
        "raw": raw,
    }
    paths = write_results(NAME, payload, markdown, seed=args.seeds[0], out_dir=out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


if __name__ == "__main__":
    main()
