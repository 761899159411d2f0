"""Run a recipe of ``upstream_recipe/`` as its users do: ``python -m <package>.<entry>`` with verl's command line
(``actor_rollout_ref.*`` spellings) on the built-in tiny model and the demo data, in a fresh process that starts
its own local Ray cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from verl.trainer.demo import prepare_demo_data, replace_overrides

RECIPE_ROOT = Path(__file__).resolve().parent / "upstream_recipe"


def verl_command_line(run_dir: Path, seed: int, steps: int, overrides: tuple[str, ...] = ()) -> list[str]:
    """GRPO on target-digit: 16 prompts x 8 responses per step, one worker process, metrics and dumps in run_dir;
    an override replaces the default of the same key (Hydra refuses a key given twice)."""
    files = prepare_demo_data()
    defaults = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={files['train']}",
        f"data.val_files={files['test']}",
        "data.train_batch_size=16",
        "data.max_prompt_length=16",
        "data.max_response_length=8",
        "actor_rollout_ref.model.path=verl:tiny-demo",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=8",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console,file]",
        f"trainer.seed={seed}",
        f"trainer.default_local_dir={run_dir}",
        f"trainer.rollout_data_dir={run_dir / 'rollouts'}",
        "ray_kwargs.ray_init.num_cpus=4",
        f"hydra.run.dir={run_dir / 'hydra'}",
    ]
    return replace_overrides(defaults, list(overrides))


def run_recipe(
    module: str, run_dir: Path, seed: int, steps: int, *overrides: str, drop_env: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """``python -m module`` with verl's command line and ``overrides``, from the recipes' folder; ``drop_env``
    names variables the recipe must do without."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(RECIPE_ROOT), os.environ.get("PYTHONPATH")]))}
    for name in drop_env:
        env.pop(name, None)
    # the recipe starts its own local cluster, as `python -m` would on a machine without one: never one that
    # `ray start` left running here
    env["RAY_ADDRESS"] = "local"
    return subprocess.run(
        [sys.executable, "-m", module, *verl_command_line(run_dir, seed, steps, overrides)],
        cwd=RECIPE_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def reward_rise(metrics: list[dict], key: str = "critic/score/mean") -> tuple[float, float]:
    """Mean of ``key`` over the first 10 and the last 10 steps."""
    scores = [row[key] for row in metrics]
    return sum(scores[:10]) / 10, sum(scores[-10:]) / 10
