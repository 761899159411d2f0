"""Chaos soak: a self-healing fully-async run on a local 2-node Ray cluster while a seeded schedule kills processes.

Each seed trains one epoch of the target-digit task (``--steps`` steps of 8 prompts x 8 samples, the tiny model, one
training rank and one rollout server, staleness 0.5 with partial rollout, a checkpoint every ``--save-freq``
steps, ``trainer.max_restarts`` on) twice: undisturbed, and with ``--faults`` SIGKILLs about every ``--every`` steps
(bench/chaos_faults.py: a rollout server, the agent-loop worker, a training rank, the rollouter, a reward scoring
process, a whole node's raylet, a training rank in the middle of a weight sync). At the end it checks:

- every prompt of the epoch consumed exactly once (the trainer's consumed indices, and the per-step sample dumps of
  the steps the final lineage kept: ``trainer.rollout_data_dir``);
- no sample trained on twice (each prompt's samples in exactly one kept step, ``rollout.n`` of them);
- the replicas' final weight checksums equal the trainer's (and the final checkpoint's);
- the reward curve within the seed spread of the undisturbed runs (mean score of the last quarter);

and reports per fault: restarts, steps redone and wall seconds lost (from the kill until the run logs a step past
the one it had reached, less one undisturbed step).

    python bench/chaos.py --seeds 0 1 2 --faults 10     # bench/results/chaos.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.chaos_cluster import SoakCluster  # noqa: E402
from bench.chaos_faults import Fault, fault_schedule, find_victim, kill, wait_for_sync_start  # noqa: E402
from bench.common import markdown_table, write_results  # noqa: E402

PROMPTS_PER_STEP = 8
SAMPLES_PER_PROMPT = 8
SCORE = "critic/score/mean"


def soak_overrides(run_dir: Path, seed: int, steps: int, save_freq: int, max_restarts: int) -> list[str]:
    """The demo's GRPO run, fully async over one training rank and one rollout server, one epoch of
    ``steps x PROMPTS_PER_STEP`` prompts, self-healing."""
    from verl.trainer.demo import demo_overrides, replace_overrides

    soak = [
        "trainer.total_training_steps=null",  # one epoch of the prompts below
        f"trainer.default_local_dir={run_dir}",
        f"trainer.rollout_data_dir={run_dir / 'rollout_data'}",
        "trainer.logger=[file]",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.resume_mode=disable",
        f"trainer.save_freq={save_freq}",
        f"trainer.max_restarts={max_restarts}",
        f"trainer.seed={seed}",
        f"rollout.seed={seed}",
        f"data.train_batch_size={PROMPTS_PER_STEP}",
        f"data.train_max_samples={steps * PROMPTS_PER_STEP}",
        f"actor.ppo_mini_batch_size={PROMPTS_PER_STEP}",
        f"rollout.n={SAMPLES_PER_PROMPT}",
        "actor.optim.lr=3e-3",
        "reward.num_workers=1",  # a scoring process of its own: a reward worker a fault can kill
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=1",
        "async_training.staleness_threshold=0.5",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.partial_rollout=true",
        f"rollout.total_rollout_steps={steps * PROMPTS_PER_STEP}",
    ]
    return replace_overrides(demo_overrides(), soak)


def soak_config(run_dir: Path, seed: int, steps: int, save_freq: int, max_restarts: int) -> Any:
    from verl.experimental.fully_async_policy.fully_async_main import CONFIG_DIR, CONFIG_NAME
    from verl.experimental.separation.entry import compose_recipe_config

    return compose_recipe_config(CONFIG_DIR, CONFIG_NAME, soak_overrides(run_dir, seed, steps, save_freq, max_restarts))


class StepWatch(threading.Thread):
    """Follows ``metrics.jsonl`` as the run appends to it: ``(seconds since start, step, restarts)`` per line (a
    restarted attempt logs the steps after its checkpoint again)."""

    def __init__(self, path: Path, poll_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.path, self.poll_s = path, poll_s
        self.start_time = time.monotonic()
        self.events: list[tuple[float, int, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        offset, partial = 0, ""
        while not self.stopped.is_set():
            if self.path.is_file():
                with self.path.open(encoding="utf-8") as handle:
                    handle.seek(offset)
                    text = handle.read()
                    offset = handle.tell()
                lines = (partial + text).split("\n")
                partial = lines.pop()
                for line in filter(None, lines):
                    record = json.loads(line)
                    now = time.monotonic() - self.start_time
                    self.events.append((now, int(record["step"]), int(record.get("training/restarts", 0))))
            self.stopped.wait(self.poll_s)

    @property
    def last_step(self) -> int:
        return self.events[-1][1] if self.events else 0

    def now(self) -> float:
        return time.monotonic() - self.start_time


def _wait(condition, timeout_s: float, what: str, alive: threading.Thread) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if not alive.is_alive():
            raise RuntimeError(f"the run ended while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:g}s")
        time.sleep(0.05)


def inject(fault: Fault, cluster: SoakCluster, watch: StepWatch, run: threading.Thread, rng: random.Random) -> dict:
    """Wait for ``fault.step``, kill its victim; returns the fault's record (the kill's time and step)."""
    _wait(lambda: watch.last_step >= fault.step, 900, f"step {fault.step}", run)
    if fault.kind == "rollouter":
        time.sleep(rng.uniform(0.1, 0.6))  # during a step, not at its end
    victim = find_victim(fault.kind, rng, cluster.head_id)
    if fault.kind == "weight_sync" and not wait_for_sync_start(Path(cluster.cluster.head_node.get_logs_dir_path())):
        raise TimeoutError("no weight sync started within 120s")
    record = {"kind": fault.kind, "scheduled_step": fault.step, "victim": victim.what, "node": victim.node_id[:8]}
    if fault.kind == "node":
        record["pid"] = cluster.kill_raylet(victim.node_id)
        record.update(t_kill=watch.now(), step_at_kill=watch.last_step, node_id=victim.node_id)
    else:
        kill(victim)
        record.update(pid=victim.pid, t_kill=watch.now(), step_at_kill=watch.last_step)
    return record


def _replace_node(cluster: SoakCluster, node_id: str, record: dict) -> None:
    """Once the run has recovered without it: the dead node is reaped and a replacement joins (an autoscaler's new
    machine), so later faults again find two nodes. In the main thread: starting a node installs signal handlers."""
    try:
        cluster.wait_until_dead(node_id)
        cluster.reap(node_id)
        cluster.add_node()
    except Exception as err:  # noqa: BLE001 - reported with the fault; the soak goes on with one node less
        record["replacement_error"] = f"{type(err).__name__}: {err}"


def fault_outcomes(records: list[dict], events: list[tuple[float, int, int]], step_s: float) -> list[dict]:
    """Per fault: the restarts it caused, the steps redone (those the run had logged before its restart past the
    checkpoint it resumed from), the seconds from the kill until the run logged a step past every step it had
    reached (``recovered_s``), and the wall time lost: that, less one undisturbed step."""
    out = []
    ends = [r["t_kill"] for r in records[1:]] + [float("inf")]
    for record, end in zip(records, ends, strict=True):
        t_kill, reached = record["t_kill"], record["step_at_kill"]
        before = [e for e in events if e[0] <= t_kill]
        restarts_before = before[-1][2] if before else 0
        after = [e for e in events if t_kill < e[0] < end]  # until the next fault's kill
        restarted = next((e for e in after if e[2] > restarts_before), None)
        redone = 0
        if restarted is not None:  # the first step logged by the restarted attempt
            reached = max(e[1] for e in events if e[0] < restarted[0])
            redone = max(0, reached - restarted[1] + 1)
        past = next((e for e in after if e[1] > reached and (restarted is None or e[0] >= restarted[0])), None)
        recovered = None if past is None else past[0] - t_kill
        out.append(
            {
                **record,
                "restarts": (past[2] if past else after[-1][2] if after else restarts_before) - restarts_before,
                "steps_redone": redone,
                "recovered_s": None if recovered is None else round(recovered, 2),
                "lost_s": None if recovered is None else round(max(0.0, recovered - step_s), 2),
            }
        )
    return out


def lineage(run_dir: Path, steps: int) -> dict[str, Any]:
    """What the kept steps trained on, from their sample dumps (a redone step overwrites its file): prompt
    indices and sample uids per step."""
    dumps = run_dir / "rollout_data"
    per_prompt: dict[Any, list[int]] = {}
    uids: list[str] = []
    rows = 0
    for step in range(1, steps + 1):
        path = dumps / f"{step}.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            sample = json.loads(line)
            rows += 1
            prompt = int(sample["rollout_index"])  # the prompt's position in the epoch's stream
            per_prompt.setdefault(prompt, []).append(step)
            uids.append(f"{sample.get('uid')}/{sample.get('output')}/{len(per_prompt[prompt])}")
    split = [p for p, s in per_prompt.items() if len(set(s)) > 1]
    wrong_count = [p for p, s in per_prompt.items() if len(s) != SAMPLES_PER_PROMPT]
    return {
        "dumped_steps": len(list(dumps.glob("*.jsonl"))) if dumps.is_dir() else 0,
        "samples": rows,
        "prompts": len(per_prompt),
        "prompts_in_two_steps": len(split),
        "prompts_without_n_samples": len(wrong_count),
    }


def within_spread(score: float, reference: list[float]) -> bool:
    """``score`` inside the undisturbed seeds' range, widened by half that range (at least 0.01) on each side."""
    low, high = min(reference), max(reference)
    margin = max((high - low) / 2, 0.01)
    return low - margin <= score <= high + margin


def merge(paths: list[Path]) -> list[dict]:
    """The seeds of earlier result files (``chaos.json``) as one soak, the reward check redone over all of them."""
    results = [seed for path in paths for seed in json.loads(Path(path).read_text())["seeds"]]
    reference = [r["clean_final_score"] for r in results]
    for r in results:
        if r.get("checks") and r.get("chaos_final_score") is not None:
            r["checks"]["reward_within_seed_spread"] = within_spread(r["chaos_final_score"], reference)
    return results


def checks(summary: dict, run_dir: Path, steps: int, reference_final: list[float], final_score: float) -> dict:
    """The soak's pass/fail checks of one chaos run."""
    from verl.trainer.ppo.checkpointing import TrainerCheckpointer

    consumed = summary["consumed_indices"]
    prompts = steps * PROMPTS_PER_STEP
    seen = lineage(run_dir, steps)
    version = summary["weight_version"]
    trainer_sum = summary["weight_checksums"].get(version) or summary["weight_checksums"].get(str(version))
    replica_sums = sorted(set(summary.get("replica_checksums", {}).values()))
    last_ckpt = TrainerCheckpointer.load_trainer_state(run_dir / f"global_step_{summary['global_steps']}")
    return {
        "prompts_consumed_once": sorted(consumed) == list(range(prompts)) and len(consumed) == prompts,
        "dumps_prompts_once": seen["prompts"] == prompts
        and seen["prompts_in_two_steps"] == 0
        and seen["prompts_without_n_samples"] == 0,
        "no_sample_twice": seen["samples"] == prompts * SAMPLES_PER_PROMPT and seen["prompts_in_two_steps"] == 0,
        "replica_checksums_equal_trainer": bool(replica_sums) and replica_sums == [trainer_sum],
        "final_checkpoint_checksum_equal": last_ckpt.get("weight_checksum") in (None, trainer_sum),
        "replicas_on_final_version": summary["replica_versions"] == [version],
        "reward_within_seed_spread": within_spread(final_score, reference_final),
        "lineage": seen,
        "trainer_checksum": trainer_sum,
        "replica_checksums": replica_sums,
    }


def final_score(run_dir: Path) -> tuple[float, list[float]]:
    """Mean score of the last quarter of the kept steps, and the kept curve."""
    from verl.utils.tracking import read_metrics

    curve = [float(m[SCORE]) for m in read_metrics(run_dir)]
    tail = curve[-max(1, len(curve) // 4) :]
    return statistics.fmean(tail), curve


def run_soak(run_dir: Path, seed: int, steps: int, schedule: list[Fault], cluster: SoakCluster, **kw: Any) -> dict:
    """One run of ``steps`` steps while ``schedule`` happens; returns the summary, fault records and step log."""
    from verl.experimental.separation.task_runner import run_async_training

    config = soak_config(run_dir, seed, steps, kw.get("save_freq", 10), kw.get("max_restarts", len(schedule) + 5))
    outcome: dict[str, Any] = {}

    def train() -> None:
        try:
            outcome["summary"] = run_async_training(config, "fully_async")
        except BaseException as err:  # noqa: BLE001 - reported with the soak's result
            outcome["error"] = f"{type(err).__name__}: {err}"

    watch = StepWatch(run_dir / "metrics.jsonl")
    run = threading.Thread(target=train, daemon=True)
    start = time.monotonic()
    watch.start()
    run.start()
    rng = random.Random(seed)
    records = []
    try:
        for fault in schedule:
            try:
                record = inject(fault, cluster, watch, run, rng)
            except LookupError as err:  # e.g. a second node fault after the run moved off the replaced node
                outcome.setdefault("skipped", []).append({"kind": fault.kind, "step": fault.step, "why": str(err)})
                continue
            records.append(record)
            print(
                f"  seed {seed}: killed {record['victim']} ({fault.kind}) at step {record['step_at_kill']}", flush=True
            )
            _wait(lambda r=record: watch.last_step > r["step_at_kill"], 600, "recovery", run)
            if fault.kind == "node":
                _replace_node(cluster, record.pop("node_id"), record)
    except (RuntimeError, TimeoutError) as err:  # the run ended or stalled
        outcome.setdefault("injector_error", f"{type(err).__name__}: {err}")
    run.join()
    wall = time.monotonic() - start
    time.sleep(0.3)
    watch.stopped.set()
    watch.join()
    return {"skipped": [], **outcome, "wall_s": wall, "faults": records, "events": watch.events}


def step_seconds(events: list[tuple[float, int, int]]) -> float:
    """Median seconds between consecutive steps of an undisturbed run."""
    gaps = [b[0] - a[0] for a, b in zip(events, events[1:], strict=False) if b[1] == a[1] + 1]
    return statistics.median(gaps) if gaps else 1.0


def soak_seed(seed: int, args: argparse.Namespace, cluster: SoakCluster, workdir: Path) -> dict:
    schedule = fault_schedule(seed, args.faults, args.every)
    reference = run_soak(workdir / f"clean_{seed}", seed, args.steps, [], cluster, save_freq=args.save_freq)
    if "summary" not in reference:
        raise RuntimeError(f"the undisturbed run of seed {seed} failed: {reference.get('error')}")
    chaos = run_soak(workdir / f"chaos_{seed}", seed, args.steps, schedule, cluster, save_freq=args.save_freq)
    step_s = step_seconds(reference["events"])
    clean_score, clean_curve = final_score(workdir / f"clean_{seed}")
    result = {
        "seed": seed,
        "schedule": [f.__dict__ for f in schedule],
        "step_s": step_s,
        "clean_wall_s": reference["wall_s"],
        "chaos_wall_s": chaos["wall_s"],
        "clean_final_score": clean_score,
        "clean_curve": clean_curve,
        "error": chaos.get("error") or chaos.get("injector_error"),
        "skipped_faults": chaos["skipped"],
        "faults": fault_outcomes(chaos["faults"], chaos["events"], step_s),
        "chaos_events": chaos["events"],  # (seconds, step, restarts) per logged step: the outcomes' raw data
    }
    if "summary" in chaos:
        score, curve = final_score(workdir / f"chaos_{seed}")
        summary = chaos["summary"]
        result.update(
            chaos_final_score=score,
            chaos_curve=curve,
            restarts=summary.get("restarts"),
            restart_causes=[c.splitlines()[0][:200] for c in summary.get("restart_causes", [])],
            summary={k: summary[k] for k in ("global_steps", "weight_version", "replica_versions")},
            run_summary=summary,
        )
    return result


def evaluate(results: list[dict], workdir: Path, steps: int) -> None:
    """Adds each seed's checks, against the spread of every seed's undisturbed final score."""
    reference = [r["clean_final_score"] for r in results]
    for r in results:
        summary = r.get("run_summary")
        if summary is not None:
            r["checks"] = checks(summary, workdir / f"chaos_{r['seed']}", steps, reference, r["chaos_final_score"])


PASS_KEYS = (
    "prompts_consumed_once",
    "dumps_prompts_once",
    "no_sample_twice",
    "replica_checksums_equal_trainer",
    "replicas_on_final_version",
    "reward_within_seed_spread",
)


def report(results: list[dict], args: argparse.Namespace) -> str:
    fault_rows = [
        [
            r["seed"],
            f["kind"],
            f["step_at_kill"],
            f["restarts"],
            f["steps_redone"],
            f["recovered_s"],
            f["lost_s"],
        ]
        for r in results
        for f in r["faults"]
    ]
    seed_rows = []
    for r in results:
        c = r.get("checks", {})
        lost = [f["lost_s"] for f in r["faults"] if f["lost_s"] is not None]
        seed_rows.append(
            [
                r["seed"],
                f"{sum(f['lost_s'] is not None for f in r['faults'])}/{args.faults}",
                r.get("restarts"),
                sum(f["steps_redone"] for f in r["faults"]),
                max(lost) if lost else None,
                statistics.fmean(lost) if lost else None,
                r["clean_wall_s"],
                r["chaos_wall_s"],
                r["clean_final_score"],
                r.get("chaos_final_score"),
                "yes" if c and all(c[k] for k in PASS_KEYS) else "NO",
            ]
        )
    lines = [
        f"# Chaos soak: {args.steps} steps, {args.faults} faults every ~{args.every} steps, seeds {args.seeds}",
        "",
        markdown_table(
            [
                "seed",
                "faults survived",
                "restarts",
                "steps redone",
                "max lost s",
                "mean lost s",
                "clean wall s",
                "chaos wall s",
                "clean score",
                "chaos score",
                "all checks",
            ],
            seed_rows,
        ),
        "",
        markdown_table(["seed", "fault", "step", "restarts", "steps redone", "recovered s", "lost s"], fault_rows),
    ]
    for r in results:
        failed = [k for k in PASS_KEYS if not r.get("checks", {}).get(k)]
        if failed or r.get("error"):
            lines += ["", f"seed {r['seed']}: failed checks {failed}; error: {r.get('error')}"]
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> Path | None:
    """Reward curves (undisturbed vs chaos) per seed, with the kills marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in results:
        (line,) = ax.plot(r["clean_curve"], alpha=0.5, linestyle="--", label=f"seed {r['seed']} undisturbed")
        if r.get("chaos_curve"):
            ax.plot(r["chaos_curve"], color=line.get_color(), label=f"seed {r['seed']} chaos")
        for f in r["faults"]:
            ax.axvline(f["step_at_kill"], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel(SCORE)
    ax.set_title("Chaos soak: reward per kept step (vertical lines: kills)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write(results: list[dict], args: argparse.Namespace) -> None:
    out = args.out or REPO / "bench" / "results"
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "seeds": results}
    write_results("chaos", payload, report(results, args), None, out)
    plot(results, out / "chaos.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=28)
    parser.add_argument("--save-freq", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    parser.add_argument("--merge", type=Path, nargs="+", help="only combine these chaos.json files into one table")
    args = parser.parse_args(argv)
    results: list[dict] = []
    if args.merge:
        results = merge(args.merge)
        args.seeds = [r["seed"] for r in results]
        _write(results, args)
        print(report(results, args))
        return 0 if all(r.get("checks") and all(r["checks"][k] for k in PASS_KEYS) for r in results) else 1
    if args.faults * args.every + args.every // 5 >= args.steps:
        parser.error(f"--faults {args.faults} every {args.every} steps do not fit in --steps {args.steps}")
    cluster = SoakCluster(workers=1).start()
    try:
        with tempfile.TemporaryDirectory(prefix="chaos_soak_") as tmp:
            for seed in args.seeds:
                print(f"chaos soak: seed {seed}", flush=True)
                results.append(soak_seed(seed, args, cluster, Path(tmp)))
                evaluate(results, Path(tmp), args.steps)
                _write(results, args)  # after each seed: a cut-short soak keeps what it measured
    finally:
        cluster.shutdown()
    print(report(results, args))
    ok = all(r.get("checks") and all(r["checks"][k] for k in PASS_KEYS) for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
