"""The built-in demo: `python -m verl.trainer.main_ppo` with no arguments.

It trains GRPO on the synthetic target-digit task (prompt `d=`, reward = fraction of 8 response tokens equal
to `d`) from the randomly initialised tiny model, on CPU with 2 worker processes, and prints the reward curve.
Model and data are built once under the cache folder (`$VERL_CACHE_DIR`, default `~/.cache/verl`) with the
same code paths as real checkpoints and parquet files.
"""

from __future__ import annotations

import os
from pathlib import Path

from verl.utils.tiny_model import default_cache_dir

DEMO_TASK = "target_digit"
DEMO_STEPS = 200
CURVE_WINDOW = 10
BAR_WIDTH = 40


def demo_cache_dir() -> Path:
    """`$VERL_CACHE_DIR` or `~/.cache/verl`: the parent of the tiny model cache."""
    return Path(os.environ.get("VERL_CACHE_DIR") or default_cache_dir().parent)


def prepare_demo_data(cache_dir: Path) -> dict[str, Path]:
    """Write the target-digit parquet files once; later runs reuse them."""
    from verl.utils.synthetic_tasks import write_task_files

    data_dir = cache_dir / "data" / DEMO_TASK
    files = {"train": data_dir / "train.parquet", "test": data_dir / "test.parquet"}
    if not all(path.is_file() for path in files.values()):
        files = write_task_files(DEMO_TASK, data_dir, train_size=4096, test_size=64, seed=0)
    return files


def demo_overrides(cache_dir: Path | None = None) -> list[str]:
    """Hydra overrides of the demo run; every one is an ordinary, documented config key."""
    cache_dir = cache_dir or demo_cache_dir()
    files = prepare_demo_data(cache_dir)
    run_dir = Path("outputs") / "demo" / "target_digit_grpo"
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={files['train']}",
        f"data.val_files={files['test']}",
        "data.train_batch_size=16",
        "data.max_prompt_length=16",
        "data.max_response_length=8",
        "model.path=verl:tiny-demo",
        "actor.optim.lr=1e-3",
        "actor.ppo_mini_batch_size=16",
        "actor.ppo_micro_batch_size_per_gpu=64",
        "actor.use_kl_loss=false",
        "actor.entropy_coeff=0",
        "rollout.n=8",
        "rollout.temperature=1.0",
        "actor.log_prob_micro_batch_size_per_gpu=64",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=2",
        f"trainer.total_training_steps={DEMO_STEPS}",
        "trainer.total_epochs=1",
        "trainer.test_freq=40",
        "trainer.val_before_train=true",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[console,file]",
        "trainer.project_name=verl_demo",
        "trainer.experiment_name=target_digit_grpo",
        f"trainer.default_local_dir={run_dir}",
    ]


def format_reward_curve(run_dir: str | os.PathLike, key: str = "critic/score/mean", window: int = CURVE_WINDOW) -> str:
    """A text chart of the mean reward per `window` steps, from the run's metrics.jsonl."""
    from verl.utils.tracking import read_metrics

    points = [(record["step"], record[key]) for record in read_metrics(run_dir) if record.get(key) is not None]
    if not points:
        raise ValueError(f"no '{key}' in {Path(run_dir) / 'metrics.jsonl'}")
    lines = [f"reward curve ({key}, mean over {window} steps)", "steps        reward"]
    for start in range(0, len(points), window):
        chunk = points[start : start + window]
        mean = sum(value for _, value in chunk) / len(chunk)
        bar = "#" * round(max(0.0, min(1.0, mean)) * BAR_WIDTH)
        lines.append(f"{chunk[0][0]:>4}-{chunk[-1][0]:<4}   {mean:6.3f} {bar}")
    return "\n".join(lines)
