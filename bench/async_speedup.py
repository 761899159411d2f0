"""Wall time of synchronous, one-step-off and fully-async training for the same samples at equal total cores.

Workload: GRPO on the target-digit task with the tiny model on CPU, ``--response-length`` tokens at most and EOS
not ignored, so response lengths are long-tailed (a randomly initialised model stops at a random point: roughly
geometric lengths capped at the limit). Every variant trains ``--steps`` steps of ``--prompts`` prompts x ``--n``
samples with 2 processes in total:

- sync: RayPPOTrainer, 2 colocated actor+rollout processes (generation and training take turns);
- one_step_off: 1 trainer process + 1 rollout process, batch k+1 generated while batch k trains;
- fully_async: 1 trainer process + 1 rollout process, staleness 0.5, partial rollout, sync every step;
- fully_async_s1: the same with staleness 1.0 (a whole batch may be generated ahead, as in one-step-off).

Ray worker processes run at niceness 0, as ``main_ppo`` and the recipes start them (Ray's default is 15).

Achieved time is the training loop's wall time (sum of per-step wall times, start-up excluded). The ideal pipelined
time is max(total generation, total training) of the sync run's stages: what perfect overlap of the same work
would cost. Reported: each variant's speed-up over sync and its pipeline efficiency (ideal / achieved).

    python bench/async_speedup.py      # writes bench/results/async_speedup.{json,md}

``--learning --seeds 1 2 3 --steps 120 --triggers 1 3`` instead compares how well sync and fully async (staleness
0.5, partial rollout, a weight sync every T updates for each T given) learn per sample consumed: reward of the first
10 and last 20 steps per seed, written to ``bench/results/async_speedup_learning.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.common import markdown_table, ratio, write_results  # noqa: E402


def _overrides(run_dir: Path, args: argparse.Namespace, processes: int) -> list[str]:
    from verl.trainer.demo import demo_overrides

    skip = (
        "trainer.total_training_steps",
        "trainer.default_local_dir",
        "trainer.logger",
        "trainer.test_freq",
        "trainer.val_before_train",
        "trainer.n_gpus_per_node",
        "data.train_batch_size",
        "rollout.n",
        "actor.ppo_mini_batch_size",
        "data.max_response_length",
    )
    return [o for o in demo_overrides() if not o.startswith(skip)] + [
        f"trainer.default_local_dir={run_dir}",
        "trainer.logger=[file]",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        f"trainer.n_gpus_per_node={processes}",
        "trainer.resume_mode=disable",
        f"data.train_batch_size={args.prompts}",
        f"actor.ppo_mini_batch_size={args.prompts}",
        f"rollout.n={args.n}",
        f"data.max_response_length={args.response_length}",
        f"trainer.seed={args.seed}",
    ]


def _loop_metrics(run_dir: Path) -> dict[str, float]:
    from verl.utils.tracking import read_metrics

    records = [r for r in read_metrics(run_dir) if "timing_s/step" in r]
    # Step 1 carries one-time warm-ups of every variant alike (reward manager start, first forward passes, the
    # async pipelines' fill): steady-state numbers start at step 2; the all-steps wall time is kept as well.
    steady = records[1:]
    step = [r["timing_s/step"] for r in steady]
    gen = [r.get("timing_s/gen", 0.0) for r in steady]
    lengths = [r["response_length/mean"] for r in records]
    return {
        "steps": len(steady),
        "wall_s": sum(step),
        "gen_s": sum(gen),
        "train_s": sum(step) - sum(gen),
        "wall_all_steps_s": sum(r["timing_s/step"] for r in records),
        "response_length_mean": statistics.fmean(lengths),
        "response_length_max": max(r["response_length/max"] for r in records),
    }


def run_sync(args: argparse.Namespace, root: Path) -> dict[str, float]:
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config
    from verl.trainer.ppo.task_runner import run_ppo

    run_dir = root / "sync"
    config, _ = resolve_config(
        compose_ppo_config(_overrides(run_dir, args, 2) + [f"trainer.total_training_steps={args.steps}"])
    )
    run_ppo(config)
    return _loop_metrics(run_dir)


def run_recipe(
    kind: str,
    args: argparse.Namespace,
    root: Path,
    staleness: float = 0.5,
    name: str | None = None,
    trigger: int = 1,
) -> dict[str, float]:
    from recipe._entry import compose_recipe_config
    from verl.experimental.separation.task_runner import run_async_training

    run_dir = root / (name or kind)
    extra = ["rollout.nnodes=1", "rollout.n_gpus_per_node=1"]
    if kind == "fully_async":
        from recipe.fully_async_policy.fully_async_main import CONFIG_DIR, CONFIG_NAME

        extra += [
            f"rollout.total_rollout_steps={args.steps * args.prompts}",
            f"async_training.staleness_threshold={staleness}",
            f"async_training.trigger_parameter_sync_step={trigger}",
            "async_training.partial_rollout=true",
            "algorithm.rollout_correction.rollout_is=token",
        ]
    else:
        from recipe.one_step_off_policy.main_ppo import CONFIG_DIR, CONFIG_NAME

        extra += [f"trainer.total_training_steps={args.steps}"]
    config = compose_recipe_config(CONFIG_DIR, CONFIG_NAME, _overrides(run_dir, args, 1) + extra)
    run_async_training(config, kind)
    return _loop_metrics(run_dir)


def _async_name(trigger: int) -> str:
    return f"fully_async_T{trigger}"


def _scores(run_dir: Path) -> list[float]:
    from verl.utils.tracking import read_metrics

    return [r["critic/score/mean"] for r in read_metrics(run_dir) if "critic/score/mean" in r]


def learning(args: argparse.Namespace) -> None:
    """Sync vs fully async (staleness 0.5, partial rollout) reward per step, same samples per step, per seed."""
    rows, payload = [], {"args": vars(args), "seeds": {}}
    with tempfile.TemporaryDirectory(prefix="verl_async_learning_") as tmp:
        for seed in args.seeds:
            args.seed = seed
            root = Path(tmp) / f"seed{seed}"
            run_sync(args, root)
            curves = {"sync": _scores(root / "sync")}
            for trigger in args.triggers:
                name = _async_name(trigger)
                run_recipe("fully_async", args, root, name=name, trigger=trigger)
                curves[name] = _scores(root / name)
            summary = {
                name: {
                    "first10": statistics.fmean(c[:10]),
                    "last20": statistics.fmean(c[-20:]),
                    "mean": statistics.fmean(c),
                    "steps": len(c),
                }
                for name, c in curves.items()
            }
            margins = {name: summary[name]["last20"] - summary["sync"]["last20"] for name in curves if name != "sync"}
            payload["seeds"][seed] = {"curves": curves, "summary": summary, "last20_margin": margins}
            for name in curves:
                if name == "sync":
                    continue
                rows.append(
                    [
                        seed,
                        name,
                        summary["sync"]["first10"],
                        summary["sync"]["last20"],
                        summary[name]["first10"],
                        summary[name]["last20"],
                        margins[name],
                    ]
                )
            print(seed, summary, flush=True)
    samples_per_step = args.prompts * args.n
    markdown = (
        "# Learning per sample: sync vs fully async (staleness 0.5, partial rollout, weight sync every T updates)\n\n"
        f"Target-digit GRPO, tiny model from random init, {args.steps} steps x {samples_per_step} samples "
        "for every run; mean reward (`critic/score/mean`).\n\n"
        + markdown_table(
            [
                "seed",
                "async run",
                "sync first 10",
                "sync last 20",
                "async first 10",
                "async last 20",
                "async - sync (last 20)",
            ],
            rows,
        )
        + "\n"
    )
    write_results("async_speedup_learning", payload, markdown, seed=None)
    print(markdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ray-cpus", type=int, default=4)
    parser.add_argument("--learning", action="store_true", help="compare learning per sample instead of speed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--triggers",
        type=int,
        nargs="+",
        default=[1, 3],
        help="with --learning: trigger_parameter_sync_step of each fully-async run",
    )
    args = parser.parse_args()

    import os

    import ray

    os.environ.setdefault("RAY_worker_niceness", "0")  # as main_ppo and the recipes start Ray
    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    if args.learning:
        learning(args)
        ray.shutdown()
        return
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="verl_async_speedup_") as tmp:
        root = Path(tmp)
        for name, run in (
            ("sync", lambda: run_sync(args, root)),
            ("one_step_off", lambda: run_recipe("one_step_off", args, root)),
            ("fully_async", lambda: run_recipe("fully_async", args, root)),
            ("fully_async_s1", lambda: run_recipe("fully_async", args, root, 1.0, "fully_async_s1")),
        ):
            start = time.perf_counter()
            results[name] = run()
            results[name]["total_with_startup_s"] = time.perf_counter() - start
            print(name, results[name], flush=True)
    ray.shutdown()

    sync = results["sync"]
    ideal = max(sync["gen_s"], sync["train_s"])
    rows = []
    for name, r in results.items():
        r["speedup_vs_sync"] = ratio(sync["wall_s"], r["wall_s"])
        r["pipeline_efficiency"] = ratio(ideal, r["wall_s"])
        rows.append(
            [
                name,
                r["steps"],
                r["wall_s"],
                r["gen_s"],
                r["train_s"],
                r["speedup_vs_sync"],
                r["pipeline_efficiency"],
                r["wall_all_steps_s"],
                r["response_length_mean"],
                r["response_length_max"],
            ]
        )
    rows.append(
        [
            "ideal pipelined max(gen, train) of sync",
            sync["steps"],
            ideal,
            sync["gen_s"],
            sync["train_s"],
            ratio(sync["wall_s"], ideal),
            1.0,
            None,
            None,
            None,
        ]
    )
    samples = args.steps * args.prompts * args.n
    table = markdown_table(
        [
            "variant",
            "steps timed",
            "loop wall s",
            "gen / wait s",
            "train s",
            "speed-up vs sync",
            "efficiency (ideal/achieved)",
            "wall incl. step 1 s",
            "mean resp len",
            "max resp len",
        ],
        rows,
    )
    markdown = (
        f"# Async training speed-up (CPU, tiny model, {samples} samples, 2 processes in total)\n\n"
        "`python bench/async_speedup.py` - loop wall time of steps 2..N (step 1 carries one-time warm-ups "
        "of every variant; start-up excluded); for the async variants the gen column is the time the "
        "trainer waited for samples. Ideal = max(total gen, total train) of the sync run's stages.\n\n" + table + "\n"
    )
    payload = {"args": vars(args), "samples": samples, "ideal_pipelined_s": ideal, "results": results}
    json_path, md_path = write_results("async_speedup", payload, markdown, seed=args.seed)
    print(markdown)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
