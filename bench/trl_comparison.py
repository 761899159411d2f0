"""Peer comparison on CPU: TRL's ``GRPOTrainer`` against our ``main_ppo`` on the same task and settings.

Same tiny checkpoint (``verl:tiny-demo``), same parquet data (the demo's target-digit task), same reward function
(``verl.utils.reward_score.default_compute_score``, called by TRL as a reward function), same group size, prompts per
step, response length, optimizer (AdamW, lr, weight decay, grad clip 1.0, constant schedule), clip ratio 0.2, no KL
term, group-std advantage scaling, token-mean loss, one update per batch, and the same number of updates.

Each trainer runs in the configurations a user of this 2-core machine would pick, and the comparison is made twice:
one core each (verl with one worker process, TRL with one torch thread), and the whole machine each (the fastest
of verl with one or two worker processes against the fastest of TRL with two torch threads or two data-parallel
processes under ``torchrun`` with gloo). Every process uses one torch thread unless the variant says otherwise.

TRL is installed from PyPI into ``bench/.venv-trl``, a venv layered over the interpreter running this script, with
torch, transformers and tokenizers pinned to the project's versions (``bench/peer_venv.py``), so both sides share them
even when the project runs in a venv of its own; it is never a project dependency. The runs go one after the other,
seed by seed.

Reported per variant: samples/s and generated tokens/s from the median step after ``--warmup`` steps, the
whole-process wall time, and the mean reward of the first and last ``--reward-window`` steps, i.e. after the same
number of samples on every side; rewards are averaged over ``--seeds``.

    python bench/trl_comparison.py                 # writes bench/results/trl_comparison.{json,md}
    python bench/trl_comparison.py --seeds 0 1 2 --steps 80
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, markdown_table, median, write_results  # noqa: E402
from bench.peer_venv import ensure_peer_venv  # noqa: E402

NAME = "trl_comparison"
VENV = REPO_ROOT / "bench" / ".venv-trl"
TARGET_SPEEDUP = 2.0
LR = 1e-3
WEIGHT_DECAY = 0.01  # verl's actor.optim.weight_decay default; TRL's default is 0, so it is set explicitly


@dataclass(frozen=True)
class Variant:
    """One way to run one trainer: ``processes`` working processes with ``threads`` torch threads each.

    ``mode`` picks verl's entry point: ``sync`` is ``main_ppo`` with every process a colocated actor+rollout worker;
    ``one_step_off`` is the one-step-off recipe with one trainer process and one rollout process, generating batch
    k+1 while batch k trains; ``fully_async`` is the fully-async recipe with the same two processes, samples
    streaming through its queue under a staleness bound (``args.staleness``), partial rollout on."""

    key: str
    trainer: str  # "trl" or "verl"
    processes: int
    threads: int
    label: str
    mode: str = "sync"
    overrides: tuple[str, ...] = ()  # verl: extra Hydra overrides of this variant

    @property
    def cores(self) -> int:
        return self.processes * self.threads


VARIANTS = (
    Variant("trl_1p1t", "trl", 1, 1, "TRL GRPOTrainer, 1 process x 1 thread"),
    Variant("trl_1p2t", "trl", 1, 2, "TRL GRPOTrainer, 1 process x 2 threads"),
    Variant("trl_2p1t", "trl", 2, 1, "TRL GRPOTrainer, 2 processes (torchrun DDP) x 1 thread"),
    Variant("verl_1w", "verl", 1, 1, "verl main_ppo, 1 worker process"),
    Variant("verl_2w", "verl", 2, 1, "verl main_ppo, 2 worker processes"),
    Variant("verl_osp", "verl", 2, 1, "verl one-step-off recipe, 1 trainer + 1 rollout process", "one_step_off"),
)
ENTRY_POINTS = {
    "sync": "verl.trainer.main_ppo",
    "one_step_off": "recipe.one_step_off_policy.main_ppo",
    "fully_async": "recipe.fully_async_policy.fully_async_main",
}
SEPARATE_ROLLOUT_MODES = ("one_step_off", "fully_async")  # one process generates, the others train
OFF_POLICY_METRICS = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_loss", "fully_async/staleness", "rollout_corr/")


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_trl(spec: str) -> str:
    """``bench/.venv-trl`` with TRL installed over the project's torch and transformers; returns TRL's version."""
    return ensure_peer_venv(VENV, spec, "trl")


def _env(threads: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["RAY_ADDRESS"] = "local"  # a cluster of the run's own, never one that `ray start` left on this machine
    return env


# ---------------------------------------------------------------------------------------------- TRL side (venv)


COMPLETION_LENGTHS: list[list[int]] = []  # TRL child: token count of each completion (EOS included), per call
REWARD_EPOCHS: list[float] = []  # TRL child: when each call scored its completions (time.time())


def trl_reward(
    completions: list[Any],
    data_source: list[str],
    reward_model: list[dict],
    completion_ids: list[list[int]] | None = None,
    **_: Any,
) -> list[float]:
    """Our scoring function, called the way TRL calls reward functions (one list entry per completion); records
    each completion's length in tokens as it goes."""
    from verl.utils.reward_score import default_compute_score

    if completion_ids is not None:
        COMPLETION_LENGTHS.append([len(ids) for ids in completion_ids])
    scores = []
    for completion, source, rm in zip(completions, data_source, reward_model):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        scores.append(float(default_compute_score(source, text, rm["ground_truth"])))
    REWARD_EPOCHS.append(time.time())
    return scores


def run_trl(args: argparse.Namespace, out: Path) -> None:
    """Child process inside the venv (one per rank under torchrun): train with GRPOTrainer; rank 0 writes per-step
    wall times and the log history."""
    import torch

    torch.set_num_threads(args.threads)
    from datasets import load_dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.seconds: list[float] = []

        def on_step_begin(self, *_, **__):
            self.starts.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            self.seconds.append(time.perf_counter() - self.starts[-1])

    start = time.perf_counter()
    dataset = load_dataset("parquet", data_files=args.data, split="train")
    dataset = dataset.select_columns(["prompt", "data_source", "reward_model"])
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    samples = args.prompts * args.n
    if samples % world_size:
        raise ValueError(f"{samples} samples per step do not split over {world_size} TRL processes")
    with tempfile.TemporaryDirectory(prefix="bench_trl_") as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            ddp_backend="gloo" if world_size > 1 else None,
            bf16=False,
            seed=args.seed,
            max_steps=args.steps,
            per_device_train_batch_size=samples // world_size,
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            num_iterations=1,
            num_generations=args.n,
            max_completion_length=args.response_length,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            epsilon=0.2,
            loss_type="dapo",
            scale_rewards="group",
            learning_rate=getattr(args, "lr", LR),
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=WEIGHT_DECAY,
            max_grad_norm=1.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        clock = StepClock()
        trainer = GRPOTrainer(
            model=args.model_dir,
            reward_funcs=trl_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[clock],
        )
        setup_s = time.perf_counter() - start
        trainer.train()
    if rank != 0:
        return
    history = [h for h in trainer.state.log_history if "reward" in h]
    out.write_text(
        json.dumps(
            {
                "step_seconds": clock.seconds,
                "reward": [h["reward"] for h in history],
                "response_length": [h.get("completions/mean_length") for h in history],
                "lengths_per_step": COMPLETION_LENGTHS,  # this rank's completions (half of them under 2-rank DDP)
                "reward_epochs": REWARD_EPOCHS,
                "setup_s": setup_s,
                "torch_threads": torch.get_num_threads(),
                "world_size": world_size,
            }
        )
    )


CHILD_ENV = "VERL_BENCH_TRL_CHILD"  # the TRL child's arguments, as JSON (torchrun would parse command-line ones)


def run_trl_child(args: argparse.Namespace, variant: Variant, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_trl_out_") as tmp:
        out = Path(tmp) / "trl.json"
        child = {
            "child_out": str(out),
            "data": args.data,
            "model_dir": args.model_dir,
            "steps": args.steps,
            "prompts": args.prompts,
            "n": args.n,
            "response_length": args.response_length,
            "seed": seed,
            "threads": variant.threads,
            "lr": getattr(args, "lr", LR),
        }
        if variant.processes > 1:
            launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={variant.processes}"]
        else:
            launcher = []
        cmd = [str(venv_python()), *launcher, str(Path(__file__).resolve())]
        env = _env(variant.threads) | {CHILD_ENV: json.dumps(child)}
        launch_epoch = time.time()
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO_ROOT)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"TRL run {variant.key} failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
        result = json.loads(out.read_text())
    result["wall_s"] = wall
    # when each step's rewards were known, in seconds from the launch (the launch of the process, setup included)
    result["reward_times"] = [t - launch_epoch for t in result.pop("reward_epochs", [])]
    return result


# ---------------------------------------------------------------------------------------------- our side


def _not_set_by(defaults: list[str], overrides: tuple[str, ...]) -> list[str]:
    """The ``key=value`` defaults whose key the variant's own overrides do not set (Hydra refuses a key twice)."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return [d for d in defaults if d.split("=", 1)[0] not in keys]


def ours_overrides(args: argparse.Namespace, run_dir: str, variant: Variant, seed: int) -> list[str]:
    separate_rollout = variant.mode in SEPARATE_ROLLOUT_MODES
    workers = variant.processes - 1 if separate_rollout else variant.processes  # the other one generates
    samples = args.prompts * args.n
    # one micro-batch per process unless the benchmark asks for smaller ones (cut in length order, see
    # verl.workers.actor.batching); the gradient is the same either way
    micro = min(samples // workers, getattr(args, "micro_batch", None) or samples)
    fully_async = [
        f"rollout.total_rollout_steps={args.steps * args.prompts}",
        f"async_training.staleness_threshold={getattr(args, 'staleness', 0.5)}",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.partial_rollout=true",
        "algorithm.rollout_correction.rollout_is=token",
    ]
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=true",
        f"data.train_files={args.data}",
        f"data.val_files={args.data}",
        f"data.train_batch_size={args.prompts}",
        "data.max_prompt_length=16",
        f"data.max_response_length={args.response_length}",
        f"model.path={getattr(args, 'model_dir', None) or 'verl:tiny-demo'}",
        f"actor.optim.lr={getattr(args, 'lr', LR)}",
        f"actor.optim.weight_decay={WEIGHT_DECAY}",
        "actor.grad_clip=1.0",
        "actor.clip_ratio=0.2",
        "actor.loss_agg_mode=token-mean",
        f"actor.ppo_mini_batch_size={args.prompts}",
        "actor.ppo_epochs=1",
        f"actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor.log_prob_micro_batch_size_per_gpu={micro}",
        "actor.use_kl_loss=false",
        "actor.entropy_coeff=0",
        f"rollout.n={args.n}",
        "rollout.temperature=1.0",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={workers}",
        f"trainer.total_training_steps={args.steps}",
        "trainer.total_epochs=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[file]",
        f"trainer.seed={seed}",
        f"trainer.default_local_dir={run_dir}",
        *(["rollout.nnodes=1", "rollout.n_gpus_per_node=1"] if separate_rollout else []),
        *(_not_set_by(fully_async, variant.overrides) if variant.mode == "fully_async" else []),
        *variant.overrides,
        *getattr(args, "verl_overrides", ()),
    ]


def generation_lengths(directory: Path, tokenizer: Any) -> list[list[int]]:
    """Response length in tokens (EOS included) of every sample, per step, from ``trainer.rollout_data_dir``."""
    steps = sorted(directory.glob("*.jsonl"), key=lambda path: int(path.stem))
    return [
        [len(tokenizer.encode(json.loads(line)["output"], add_special_tokens=False)) for line in path.open()]
        for path in steps
    ]


def generation_epochs(directory: Path) -> list[float]:
    """When each step's generation dump was written (after its rewards, before its update), per step."""
    return [path.stat().st_mtime for path in sorted(directory.glob("*.jsonl"), key=lambda path: int(path.stem))]


def run_ours(
    args: argparse.Namespace,
    variant: Variant,
    seed: int,
    timeline: Path | None = None,
    lengths: bool = False,
    sample_cpu: bool = False,
) -> dict:
    """One verl run as a subprocess; ``timeline`` records Ray's task timeline there, ``lengths`` reads every
    sample's response length from the run's generation dumps, ``sample_cpu`` samples the CPU time of every process
    of the run (the result's ``cpu_sampler``, a :class:`bench.process_cpu.ProcessTreeCpu`; not JSON)."""
    from bench.process_cpu import ProcessTreeCpu
    from verl.utils.tracking import read_metrics

    with tempfile.TemporaryDirectory(prefix="bench_ours_") as run_dir:
        overrides = ours_overrides(args, run_dir, variant, seed)
        generations = Path(run_dir) / "generations"
        if lengths:
            overrides.append(f"trainer.rollout_data_dir={generations}")
        if timeline is not None:
            overrides.append(f"ray_kwargs.timeline_json_file={timeline}")
        cmd = [sys.executable, "-m", ENTRY_POINTS[variant.mode], *overrides]
        launch_epoch = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=_env(variant.threads), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT
        )
        sampler = ProcessTreeCpu(proc.pid).start() if sample_cpu else None
        try:
            _, stderr = proc.communicate()
        finally:
            if sampler is not None:
                sampler.stop()
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(
                f"{ENTRY_POINTS[variant.mode]} {variant.key} failed (rc={proc.returncode}):\n{stderr[-4000:]}"
            )
        records = list(read_metrics(run_dir))
        if lengths:
            from transformers import AutoTokenizer

            per_step = generation_lengths(generations, AutoTokenizer.from_pretrained(args.model_dir))
            reward_times = [t - launch_epoch for t in generation_epochs(generations)]
    return {
        **({"lengths_per_step": per_step, "reward_times": reward_times} if lengths else {}),
        **({"cpu_sampler": sampler} if sampler is not None else {}),
        "step_seconds": [r["timing_s/step"] for r in records],
        "reward": [r["critic/score/mean"] for r in records],
        "response_length": [r["response_length/mean"] for r in records],
        # the off-policy figures of every step (clipped share, ratio spread, sample ages), for the loss comparison
        "off_policy": [{k: v for k, v in r.items() if k.startswith(OFF_POLICY_METRICS)} for r in records],
        "wall_s": wall,
        "overrides": ours_overrides(args, "<tmp>", variant, seed),
    }


# ---------------------------------------------------------------------------------------------- summary


def summarize(runs: list[dict], samples_per_step: int, warmup: int, window: int) -> dict:
    """Throughput from the median step after ``warmup`` over all seeds' steps; rewards averaged over seeds."""
    steps = [s for run in runs for s in run["step_seconds"][warmup:]]
    lengths = [x for run in runs for x in run["response_length"][warmup:] if x is not None]
    step_s = median(steps)
    return {
        "median_step_s": step_s,
        "samples_per_s": samples_per_step / step_s,
        "tokens_per_s": samples_per_step * statistics.mean(lengths) / step_s,
        "mean_response_length": statistics.mean(lengths),
        "reward_first": statistics.mean(statistics.mean(run["reward"][:window]) for run in runs),
        "reward_last": statistics.mean(statistics.mean(run["reward"][-window:]) for run in runs),
        "reward_last_per_seed": [statistics.mean(run["reward"][-window:]) for run in runs],
        "wall_s": statistics.mean(run["wall_s"] for run in runs),
        "updates": len(runs[0]["step_seconds"]),
    }


def _fastest(summary: dict[str, dict], trainer: str, max_cores: int) -> Variant:
    candidates = [v for v in VARIANTS if v.trainer == trainer and v.key in summary and v.cores <= max_cores]
    return max(candidates, key=lambda v: summary[v.key]["samples_per_s"])


def compare(summary: dict[str, dict], cores: int) -> dict[str, Any]:
    ours, theirs = _fastest(summary, "verl", cores), _fastest(summary, "trl", cores)
    return {
        "cores": cores,
        "verl": ours.key,
        "trl": theirs.key,
        "speedup": summary[ours.key]["samples_per_s"] / summary[theirs.key]["samples_per_s"],
        "reward_verl": summary[ours.key]["reward_last"],
        "reward_trl": summary[theirs.key]["reward_last"],
    }


def render(args: argparse.Namespace, summary: dict[str, dict], comparisons: list[dict], trl_version: str) -> str:
    labels = {v.key: v.label.replace("TRL GRPOTrainer", f"TRL GRPOTrainer {trl_version}") for v in VARIANTS}
    rows = []
    for v in VARIANTS:
        if v.key not in summary:
            continue
        s = summary[v.key]
        rows.append(
            [
                labels[v.key],
                v.cores,
                s["samples_per_s"],
                s["tokens_per_s"],
                s["median_step_s"],
                s["reward_first"],
                s["reward_last"],
                s["wall_s"],
            ]
        )
    table = markdown_table(
        [
            "trainer",
            "cores",
            "samples/s",
            "generated tokens/s",
            "median step (s)",
            f"reward, first {args.reward_window} steps",
            f"reward, last {args.reward_window} steps",
            f"whole run, {args.steps} steps (s)",
        ],
        rows,
    )
    lines = [
        f"GRPO on the target-digit task, tiny model, CPU; {args.prompts} prompts x {args.n} samples per step, up to "
        f"{args.response_length} response tokens, {args.steps} updates, seeds {', '.join(map(str, args.seeds))} "
        f"(rewards averaged over seeds); throughput from the median step after {args.warmup} warm-up steps.",
        "",
        table,
        "",
    ]
    samples = args.steps * args.prompts * args.n
    for c in comparisons:
        verdict = "meets" if c["speedup"] >= TARGET_SPEEDUP else "misses"
        lines.append(
            f"- {c['cores']} core(s) each: {labels[c['verl']]} / {labels[c['trl']]} = **{c['speedup']:.2f}x** "
            f"samples/s ({verdict} the {TARGET_SPEEDUP:.0f}x target); reward after {samples} samples: verl "
            f"{c['reward_verl']:.3f}, TRL {c['reward_trl']:.3f}."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="updates on each side")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="group size (rollout.n / num_generations)")
    parser.add_argument("--response-length", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reward-window", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--only", nargs="+", choices=[v.key for v in VARIANTS], help="run only these variants")
    parser.add_argument("--trl-spec", default="trl", help="pip requirement installed into bench/.venv-trl")
    parser.add_argument("--out-dir", type=Path, default=None)
    if os.environ.get(CHILD_ENV):
        child = argparse.Namespace(**json.loads(os.environ[CHILD_ENV]))
        run_trl(child, Path(child.child_out))
        return None
    args = parser.parse_args(argv)
    if args.steps <= max(args.warmup, args.reward_window):
        parser.error(f"--steps ({args.steps}) must exceed --warmup and --reward-window")

    from verl.trainer.demo import demo_cache_dir, prepare_demo_data
    from verl.utils.tiny_model import tiny_model_path

    try:
        trl_version = ensure_trl(args.trl_spec)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
        print(f"skipped: TRL could not be installed into {VENV} ({exc})")
        return None
    args.data = str(prepare_demo_data(demo_cache_dir())["train"])
    args.model_dir = str(tiny_model_path())
    variants = [v for v in VARIANTS if not args.only or v.key in args.only]
    raw: dict[str, list[dict]] = {v.key: [] for v in variants}
    for seed in args.seeds:
        for variant in variants:
            run = run_trl_child(args, variant, seed) if variant.trainer == "trl" else run_ours(args, variant, seed)
            run["seed"] = seed
            raw[variant.key].append(run)
            print(
                f"seed {seed} {variant.key}: median step {median(run['step_seconds'][args.warmup :]):.3f} s, "
                f"last-{args.reward_window} reward {statistics.mean(run['reward'][-args.reward_window :]):.3f}",
                flush=True,
            )
    samples = args.prompts * args.n
    summary = {key: summarize(runs, samples, args.warmup, args.reward_window) for key, runs in raw.items()}
    comparisons = []
    for cores in (1, 2):
        try:
            comparisons.append(compare(summary, cores))
        except ValueError:  # a side has no variant within this many cores (--only)
            continue
    markdown = render(args, summary, comparisons, trl_version)
    print(markdown)
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "trl_version": trl_version,
        "target_speedup": TARGET_SPEEDUP,
        "variants": {
            v.key: {"label": v.label, "processes": v.processes, "threads": v.threads, "mode": v.mode} for v in variants
        },
        "comparisons": comparisons,
        "summary": summary,
        "raw": raw,
    }
    paths = write_results(NAME, payload, markdown, seed=args.seeds[0], out_dir=args.out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


if __name__ == "__main__":
    main()
