"""Long-tailed generations on CPU: TRL against our layouts, and fully async against sync, on one workload.

Workload: the synthetic ``long_tail`` task (``"7x37:"`` -> 37 sevens; the lengths asked for are log-uniform in
2..256) on a digits-only tiny checkpoint built from random init, up to ``--response-length`` (256) response tokens,
EOS honoured. The policy decides every length: at random init it stops after a geometric number of tokens (median
about 16, a tail past 100), and as it learns the task its lengths follow the asked ones, most short and a few at the
limit. The reward (``verl.utils.reward_score.long_tail``) counts matching characters over the longer of answer and
response, so it rises as the policy learns both the digit and when to stop.

Every side trains on the same checkpoint, parquet rows, reward function, group size, prompts per step, sampling
(temperature 1, no top-k/top-p, stop at EOS or the limit), optimizer and number of updates, with 2 cores in all:

- TRL ``GRPOTrainer``: one process with two torch threads, or two DDP processes (``bench/trl_comparison.py``'s venv);
- verl sync: ``main_ppo``, 2 colocated actor+rollout processes;
- verl one-step-off: 1 trainer + 1 rollout process (bypass mode: the rollout's log-probs are the old ones);
- verl fully async: 1 trainer + 1 rollout process, staleness 1 and 2, partial rollout, weights every step; at
  staleness 2 also with the REINFORCE loss weighted by truncated token ratios (``loss_type=reinforce``,
  ``rollout_is=token``) instead of PPO-clip against the generating policy, and with weights every 2 updates.

verl's updates run in micro-batches of ``--micro-batch`` samples (16) cut from the rows in order of length, so a
padded forward stops at its micro-batch's longest answer (``verl.workers.actor.batching``); the gradient is the
mini-batch's either way. TRL trains each process's batch in one padded forward.

Reported per variant (pooled over ``--seeds``): samples/s over the steps after ``--warmup`` (samples / summed step
wall time), reward of the last ``--reward-window`` steps (after the same number of samples on every side), and the
response lengths of every sample (min / median / p90 / max, first step and whole run). The verl runs of the first seed
record Ray's timeline; ``bench/timeline.py`` turns each into a PNG and a pipeline efficiency, and
``bench/process_cpu.py`` says how many cores every process of the run (the controller side too) kept busy over the
same steady window. Also drawn: the length histogram of the first step and of the last steps.

    python bench/long_tail.py                       # writes bench/results/long_tail.{json,md} and PNGs
    python bench/long_tail.py --seeds 0 --steps 12  # a quicker look
"""

from __future__ import annotations

import argparse
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
TARGET_VS_TRL = 2.0
TARGET_ASYNC_VS_SYNC = 1.5
TARGET_EFFICIENCY = 0.85
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
FULLY_ASYNC = ("verl_fa", "verl_fa_s2", "verl_fa_s2_is", "verl_fa_s2_is_t2")


def prepare(args: argparse.Namespace) -> None:
    """The digits-only checkpoint and the long-tail parquet rows, built once under the cache folder."""
    from verl.trainer.demo import prepare_task_data
    from verl.utils.synthetic_tasks import LONG_TAIL_CHARSET
    from verl.utils.tiny_model import tiny_model_path

    args.data = str(prepare_task_data("long_tail")["train"])
    args.model_dir = str(tiny_model_path(charset=LONG_TAIL_CHARSET))


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
        "lengths_first_step": length_stats(first_step),
        "lengths_all": length_stats(every),
        "lengths_last": length_stats(last),
        "wall_s": statistics.fmean(r["wall_s"] for r in runs),
        "updates": len(runs[0]["step_seconds"]),
    }


def _best(summary: dict[str, dict], trainer: str, keys: list[str]) -> str:
    candidates = [k for k in keys if k.startswith(trainer) and k in summary]
    return max(candidates, key=lambda k: summary[k]["samples_per_s"])


def compare(summary: dict[str, dict], ours: str, theirs: str) -> dict[str, Any]:
    """Pooled ratio of samples/s, and its range over seeds (seeds paired by position)."""
    per_seed = [
        a / b for a, b in zip(summary[ours]["samples_per_s_per_seed"], summary[theirs]["samples_per_s_per_seed"])
    ]
    return {
        "ours": ours,
        "theirs": theirs,
        "ratio": summary[ours]["samples_per_s"] / summary[theirs]["samples_per_s"],
        "ratio_min": min(per_seed),
        "ratio_max": max(per_seed),
        "reward_ours": summary[ours]["reward_last"],
        "reward_theirs": summary[theirs]["reward_last"],
        "equal_reward": equal_reward(summary, ours, theirs),
    }


def equal_reward(summary: dict[str, dict], ours: str, theirs: str) -> bool:
    """Whether ``ours`` learned as much per sample: its mean reward of the last steps is at least the lowest of
    ``theirs``'s seeds (the targets ask for speed "at equal reward, within the spread of the seeds")."""
    return summary[ours]["reward_last"] >= min(summary[theirs]["reward_last_per_seed"])


def fastest_at_equal_reward(summary: dict[str, dict], candidates: list[str], theirs: str) -> list[str]:
    """The fastest of ``candidates`` that learns as much as ``theirs``, then the fastest of all when that is
    another one (the second comparison shows what the reward costs)."""
    by_speed = sorted(candidates, key=lambda k: summary[k]["samples_per_s"], reverse=True)
    equal = [k for k in by_speed if equal_reward(summary, k, theirs)]
    return list(dict.fromkeys(equal[:1] + by_speed[:1]))


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


def render(args: argparse.Namespace, summary: dict, comparisons: dict, timelines: dict, labels: dict) -> str:
    rows = []
    for key, s in summary.items():
        first, every = s["lengths_first_step"], s["lengths_all"]
        rows.append(
            [
                labels[key],
                s["samples_per_s"],
                f"{min(s['samples_per_s_per_seed']):.1f}-{max(s['samples_per_s_per_seed']):.1f}",
                s["reward_first"],
                s["reward_last"],
                f"{first['min']}/{first['median']:g}/{first['p90']}/{first['max']}",
                f"{every['min']}/{every['median']:g}/{every['p90']}/{every['max']}",
                timelines.get(key, {}).get("pipeline_efficiency"),
            ]
        )
    table = markdown_table(
        [
            "variant",
            "samples/s",
            "per seed",
            f"reward, first {args.reward_window} steps",
            f"reward, last {args.reward_window} steps",
            "lengths step 1 (min/med/p90/max)",
            "lengths all steps",
            "pipeline efficiency",
        ],
        rows,
    )
    lines = [
        f"GRPO on the long-tail task, digits-only tiny model from random init, CPU with 2 cores per side; "
        f"{args.prompts} prompts x {args.n} samples per step, up to {args.response_length} response tokens, "
        f"{args.steps} updates, seeds {', '.join(map(str, args.seeds))}; verl's updates in micro-batches of "
        f"{args.micro_batch} samples cut in length order, TRL's in one; throughput over steps after {args.warmup} "
        "warm-up steps; pipeline efficiency from the first seed's Ray timeline (bench/timeline.py).",
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
    for name, target in (("vs_trl", TARGET_VS_TRL), ("async_vs_sync", TARGET_ASYNC_VS_SYNC)):
        for c in comparisons.get(name, []):
            met = c["ratio"] >= target and c["equal_reward"]
            reward = "within" if c["equal_reward"] else "below"
            lines.append(
                f"- {labels[c['ours']]} / {labels[c['theirs']]} = **{c['ratio']:.2f}x** samples/s (seeds "
                f"{c['ratio_min']:.2f}-{c['ratio_max']:.2f}); reward of the last {args.reward_window} steps "
                f"{c['reward_ours']:.4f} against {c['reward_theirs']:.4f}, {reward} the other side's seed range: "
                f"{'meets' if met else 'misses'} the {target:g}x-at-equal-reward target."
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="updates on each side")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="group size")
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=16,
        help="verl's micro-batch per process (cut in length order); TRL trains its batch in one",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reward-window", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", choices=[v.key for v in VARIANTS], help="run only these variants")
    parser.add_argument("--trl-spec", default="trl", help="pip requirement installed into bench/.venv-trl")
    parser.add_argument("--out-dir", type=Path, default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    if args.steps <= max(args.warmup, args.reward_window):
        parser.error(f"--steps ({args.steps}) must exceed --warmup and --reward-window")
    out_dir = args.out_dir or RESULTS_DIR
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
                print(f"seed {seed} {variant.key}: steps {[round(s, 2) for s in run['step_seconds']]}", flush=True)

    samples = args.prompts * args.n
    summary = {key: summarize(runs, samples, args.warmup, args.reward_window) for key, runs in raw.items()}
    keys = list(summary)
    comparisons: dict[str, list[dict]] = {}
    ours = [k for k in keys if k.startswith("verl")]
    if any(k.startswith("trl") for k in keys) and ours:
        trl = _best(summary, "trl", keys)
        comparisons["vs_trl"] = [compare(summary, k, trl) for k in fastest_at_equal_reward(summary, ours, trl)]
    fully_async = [k for k in FULLY_ASYNC if k in summary]
    if fully_async and "verl_sync" in summary:
        comparisons["async_vs_sync"] = [
            compare(summary, k, "verl_sync") for k in fastest_at_equal_reward(summary, fully_async, "verl_sync")
        ]
    histogram = draw_lengths(raw, keys, args.reward_window, out_dir / f"{NAME}_lengths.png")
    markdown = render(args, summary, comparisons, timelines, labels)
    print(markdown)
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "trl_version": trl_version,
        "targets": {"vs_trl": TARGET_VS_TRL, "async_vs_sync": TARGET_ASYNC_VS_SYNC, "efficiency": TARGET_EFFICIENCY},
        "variants": {v.key: {"label": labels[v.key], "mode": v.mode, "overrides": v.overrides} for v in variants},
        "comparisons": comparisons,
        "timelines": timelines,
        "summary": summary,
        "length_histogram": histogram.name,
        "raw": raw,
    }
    paths = write_results(NAME, payload, markdown, seed=args.seeds[0], out_dir=out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


if __name__ == "__main__":
    main()
