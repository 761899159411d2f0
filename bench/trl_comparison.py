"""Peer comparison on CPU: TRL's ``GRPOTrainer`` against our ``main_ppo`` on the same task and settings.

Same tiny checkpoint (``verl:tiny-demo``), same parquet data (the demo's target-digit task), same reward function
(``verl.utils.reward_score.default_compute_score``, called by TRL as a reward function), same group size, prompts per
step, response length, optimizer (AdamW, lr, weight decay, grad clip 1.0, constant schedule), clip ratio 0.2, no KL
term, group-std advantage scaling, token-mean loss, one update per batch, and the same number of updates.
Both run with one torch thread (``OMP_NUM_THREADS=1``) and one process doing the work.

TRL is installed from PyPI into ``bench/.venv-trl`` (a venv with the system site packages, so both sides share
torch and transformers); it is never a project dependency. The two runs go one after the other.

Reported: samples/s and generated tokens/s over the steps after ``--warmup`` (median step time), the whole-process
wall time, and the mean reward of the last ``--reward-window`` steps, i.e. after the same number of samples.

    python bench/trl_comparison.py            # writes bench/results/trl_comparison.{json,md}
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
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, markdown_table, median, write_results  # noqa: E402

NAME = "trl_comparison"
VENV = REPO_ROOT / "bench" / ".venv-trl"
TARGET_SPEEDUP = 2.0
LR = 1e-3
WEIGHT_DECAY = 0.01  # verl's actor.optim.weight_decay default; TRL's default is 0, so it is set explicitly


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_trl(spec: str) -> str:
    """Create ``bench/.venv-trl`` and install TRL there if needed; returns the installed TRL version."""
    python = venv_python()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        install = subprocess.run([str(python), "-m", "pip", "install", "-q", spec], capture_output=True, text=True)
        if install.returncode != 0:
            raise RuntimeError(f"pip install {spec} into {VENV} failed:\n{install.stderr[-3000:]}")
        probe = subprocess.run([str(python), "-c", "import trl; print(trl.__version__)"], capture_output=True,
                               text=True, check=True)
    return probe.stdout.strip()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------------------------------------- TRL side (venv)


def trl_reward(completions: list[Any], data_source: list[str], reward_model: list[dict], **_: Any) -> list[float]:
    """Our scoring function, called the way TRL calls reward functions (one list entry per completion)."""
    from verl.utils.reward_score import default_compute_score

    scores = []
    for completion, source, rm in zip(completions, data_source, reward_model):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        scores.append(float(default_compute_score(source, text, rm["ground_truth"])))
    return scores


def run_trl(args: argparse.Namespace, out: Path) -> None:
    """Child process inside the venv: train with GRPOTrainer, write per-step wall times and log history."""
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_TRL_THREADS", "1")))
    from datasets import load_dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

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
    with tempfile.TemporaryDirectory(prefix="bench_trl_") as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            bf16=False,
            seed=args.seed,
            max_steps=args.steps,
            per_device_train_batch_size=samples,
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
            learning_rate=LR,
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
        trainer = GRPOTrainer(model=args.model_dir, reward_funcs=trl_reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[clock])
        setup_s = time.perf_counter() - start
        trainer.train()
    history = [h for h in trainer.state.log_history if "reward" in h]
    out.write_text(json.dumps({
        "step_seconds": clock.seconds,
        "reward": [h["reward"] for h in history],
        "response_length": [h.get("completions/mean_length") for h in history],
        "setup_s": setup_s,
        "torch_threads": torch.get_num_threads(),
    }))


# ---------------------------------------------------------------------------------------------- our side


def ours_overrides(args: argparse.Namespace, run_dir: str) -> list[str]:
    samples = args.prompts * args.n
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=true",
        f"data.train_files={args.data}",
        f"data.val_files={args.data}",
        f"data.train_batch_size={args.prompts}",
        "data.max_prompt_length=16",
        f"data.max_response_length={args.response_length}",
        "model.path=verl:tiny-demo",
        f"actor.optim.lr={LR}",
        f"actor.optim.weight_decay={WEIGHT_DECAY}",
        "actor.grad_clip=1.0",
        "actor.clip_ratio=0.2",
        "actor.loss_agg_mode=token-mean",
        f"actor.ppo_mini_batch_size={args.prompts}",
        "actor.ppo_epochs=1",
        f"actor.ppo_micro_batch_size_per_gpu={samples}",
        f"actor.log_prob_micro_batch_size_per_gpu={samples}",
        "actor.use_kl_loss=false",
        "actor.entropy_coeff=0",
        f"rollout.n={args.n}",
        "rollout.temperature=1.0",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={args.steps}",
        "trainer.total_epochs=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[file]",
        f"trainer.seed={args.seed}",
        f"trainer.default_local_dir={run_dir}",
    ]


def run_ours(args: argparse.Namespace) -> dict:
    from verl.utils.tracking import read_metrics

    with tempfile.TemporaryDirectory(prefix="bench_ours_") as run_dir:
        cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *ours_overrides(args, run_dir)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, cwd=REPO_ROOT)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"main_ppo failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
        records = list(read_metrics(run_dir))
    return {
        "step_seconds": [r["timing_s/step"] for r in records],
        "reward": [r["critic/score/mean"] for r in records],
        "response_length": [r["response_length/mean"] for r in records],
        "wall_s": wall,
        "overrides": ours_overrides(args, "<tmp>"),
    }


def run_trl_child(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_trl_out_") as tmp:
        out = Path(tmp) / "trl.json"
        cmd = [str(venv_python()), str(Path(__file__).resolve()), "--role", "trl", "--child-out", str(out),
               "--data", args.data, "--model-dir", args.model_dir, "--steps", str(args.steps),
               "--prompts", str(args.prompts), "--n", str(args.n), "--response-length", str(args.response_length),
               "--seed", str(args.seed)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, cwd=REPO_ROOT)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"TRL run failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
        result = json.loads(out.read_text())
    result["wall_s"] = wall
    return result


def summarize(side: dict, samples_per_step: int, warmup: int, window: int) -> dict:
    steps = side["step_seconds"][warmup:]
    lengths = [x for x in side["response_length"][warmup:] if x is not None]
    step_s = median(steps)
    return {
        "median_step_s": step_s,
        "samples_per_s": samples_per_step / step_s,
        "tokens_per_s": samples_per_step * statistics.mean(lengths) / step_s,
        "mean_response_length": statistics.mean(lengths),
        "reward_first": statistics.mean(side["reward"][:window]),
        "reward_last": statistics.mean(side["reward"][-window:]),
        "wall_s": side["wall_s"],
        "updates": len(side["step_seconds"]),
    }


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="updates on each side")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="group size (rollout.n / num_generations)")
    parser.add_argument("--response-length", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reward-window", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trl-spec", default="trl", help="pip requirement installed into bench/.venv-trl")
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--role", choices=("orchestrate", "trl"), default="orchestrate", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "trl":
        run_trl(args, args.child_out)
        return None
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
    trl = run_trl_child(args)
    ours = run_ours(args)
    samples = args.prompts * args.n
    s_trl = summarize(trl, samples, args.warmup, args.reward_window)
    s_ours = summarize(ours, samples, args.warmup, args.reward_window)
    speedup = s_ours["samples_per_s"] / s_trl["samples_per_s"]
    rows = []
    for name, s in (("TRL GRPOTrainer " + trl_version, s_trl), ("verl main_ppo", s_ours)):
        rows.append([name, s["samples_per_s"], s["tokens_per_s"], s["median_step_s"], s["reward_first"],
                     s["reward_last"], s["wall_s"]])
    table = markdown_table(["trainer", "samples/s", "generated tokens/s", "median step (s)",
                            f"reward, first {args.reward_window} steps", f"reward, last {args.reward_window} steps",
                            f"whole run, {args.steps} steps (s)"], rows)
    verdict = "meets" if speedup >= TARGET_SPEEDUP else "misses"
    markdown = "\n".join([
        f"GRPO on the target-digit task, tiny model, CPU, 1 torch thread each; {args.prompts} prompts x "
        f"{args.n} samples per step, up to {args.response_length} response tokens, {args.steps} updates; "
        f"throughput from the median step after {args.warmup} warm-up steps.",
        "",
        table,
        "",
        f"verl / TRL throughput: {speedup:.2f}x ({verdict} the {TARGET_SPEEDUP:.0f}x target); reward after "
        f"{args.steps * samples} samples: verl {s_ours['reward_last']:.3f}, TRL {s_trl['reward_last']:.3f}.",
    ])
    print(markdown)
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "trl_version": trl_version,
        "target_speedup": TARGET_SPEEDUP,
        "speedup_samples_per_s": speedup,
        "summary": {"trl": s_trl, "verl": s_ours},
        "raw": {"trl": trl, "verl": ours},
    }
    paths = write_results(NAME, payload, markdown, seed=args.seed, out_dir=args.out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


if __name__ == "__main__":
    main()
