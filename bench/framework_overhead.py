"""Framework overhead: one GRPO step of ``main_ppo`` against a bare single-process loop doing the same work.

Both sides run the same tiny checkpoint, the same parquet data, the same sizes (``--prompts`` x ``--n`` samples of
at most ``--response-length`` tokens) and the same building blocks, so the ratio isolates what the framework adds
(Ray, the TaskRunner, worker groups, DataProto dispatch and collection, the agent loop and hybrid rollout, FSDP2 on
one rank, the reward process):

- framework: ``python -m verl.trainer.main_ppo`` with one worker process on CPU; per-stage times are the trainer's own
  ``timing_s/*`` metrics read back from ``metrics.jsonl``.
- bare: one process, no Ray, no FSDP; the same ``HFRolloutServer`` engine class serving the actor's own module, the
  same ``DataParallelPPOActor`` for log-probs and the update, the same ``compute_advantage`` and scoring function,
  timed with the same stage boundaries.

Both use one torch thread (``OMP_NUM_THREADS=1``). The sides run one after the other (bare, framework, bare) so they
do not compete for the CPU; the first ``--warmup`` steps of each run are dropped and medians are reported.

    python bench/framework_overhead.py            # writes bench/results/framework_overhead.{json,md}
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, markdown_table, median, ratio, write_results  # noqa: E402

NAME = "framework_overhead"
STAGES = ("gen", "reward", "old_log_prob", "adv", "update_actor", "update_weights")
TARGET_RATIO = 1.15
RAY_DEFAULT_NICENESS = 15  # Ray starts worker processes at this niceness unless RAY_worker_niceness says otherwise


def overrides(
    data_file: str, prompts: int, n: int, response_length: int, steps: int, run_dir: str, workers: int, seed: int
) -> list[str]:
    """The ``main_ppo`` overrides of the measured run; the bare loop reads the same composed config."""
    samples = prompts * n
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data_file}",
        f"data.val_files={data_file}",
        f"data.train_batch_size={prompts}",
        "data.max_prompt_length=16",
        f"data.max_response_length={response_length}",
        "model.path=verl:tiny-demo",
        "actor.optim.lr=1e-3",
        f"actor.ppo_mini_batch_size={prompts}",
        f"actor.ppo_micro_batch_size_per_gpu={samples}",
        f"actor.log_prob_micro_batch_size_per_gpu={samples}",
        "actor.use_kl_loss=false",
        "actor.entropy_coeff=0",
        f"rollout.n={n}",
        "rollout.temperature=1.0",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={workers}",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[file]",
        f"trainer.seed={seed}",
        f"trainer.default_local_dir={run_dir}",
    ]


# ---------------------------------------------------------------------------------------------- bare loop


class BareLoop:
    """GRPO on one process with the framework's building blocks and none of its plumbing."""

    def __init__(self, config: Any, seed: int) -> None:
        import torch

        from verl.utils.dataset.collate import collate_fn
        from verl.utils.dataset.factory import create_rl_dataset
        from verl.workers.actor.dp_actor import DataParallelPPOActor
        from verl.workers.config import FSDPActorConfig, HFModelConfig, RolloutConfig
        from verl.workers.fsdp.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
        from verl.workers.fsdp.optimizer import build_lr_scheduler, build_optimizer
        from verl.workers.fsdp.worker_config import per_rank_update_sizes, read_group
        from verl.workers.rollout.hf.server import HFRolloutServer

        torch.manual_seed(seed)
        self.config = config
        model_cfg = read_group(config, "model", HFModelConfig)
        actor_cfg = read_group(config, "actor", FSDPActorConfig)
        self.rollout_cfg = read_group(config, "rollout", RolloutConfig)
        self.n = int(self.rollout_cfg.n)
        path = resolve_model_path(model_cfg)
        self.tokenizer = load_tokenizer(model_cfg, path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.model = load_causal_lm(model_cfg, path, torch.float32)
        optimizer = build_optimizer(self.model.parameters(), actor_cfg.optim)
        self.scheduler = build_lr_scheduler(optimizer, actor_cfg.optim)
        sizes = per_rank_update_sizes(actor_cfg, "actor", self.n, 1)
        view = dataclasses.replace(actor_cfg, use_remove_padding=bool(model_cfg.use_remove_padding), **sizes)
        self.actor = DataParallelPPOActor(view, self.model, optimizer)
        self.log_prob_micro = int(actor_cfg.log_prob_micro_batch_size_per_gpu)
        self.on_policy = (
            bool(actor_cfg.skip_on_policy_log_prob)
            and int(actor_cfg.ppo_epochs) == 1
            and int(actor_cfg.ppo_mini_batch_size) >= int(config.data.train_batch_size)
        )
        # The engine serves the actor's own module: a single-process loop needs no weight sync.
        self.engine = HFRolloutServer(self.rollout_cfg, model=self.model, seed=seed)
        self.loop = asyncio.new_event_loop()
        dataset = create_rl_dataset(config.data.train_files, config.data, self.tokenizer, None, is_train=True)
        generator = torch.Generator().manual_seed(seed)
        self.loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=int(config.data.train_batch_size),
            shuffle=True,
            generator=generator,
            collate_fn=collate_fn,
            drop_last=True,
        )

    def close(self) -> None:
        """Cancel the engine's background task so the process exits without 'Task was destroyed' noise."""
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def generate(self, batch: Any) -> Any:
        import numpy as np
        import torch

        from verl.protocol import DataProto

        input_ids = batch.batch["input_ids"].repeat_interleave(self.n, dim=0)
        attention_mask = batch.batch["attention_mask"].repeat_interleave(self.n, dim=0)
        position_ids = batch.batch["position_ids"].repeat_interleave(self.n, dim=0)
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention_mask)]
        cfg = self.rollout_cfg
        params = {
            "temperature": float(cfg.temperature),
            "top_p": float(cfg.top_p),
            "top_k": int(cfg.top_k),
            "do_sample": True,
            "max_tokens": int(cfg.response_length),
            "logprobs": False,
            "ignore_eos": bool(cfg.ignore_eos),
        }

        async def all_rows():
            return await asyncio.gather(
                *(self.engine.generate(r, params, f"b{time.monotonic_ns()}-{i}") for i, r in enumerate(rows))
            )

        outputs = self.loop.run_until_complete(all_rows())
        width = int(cfg.response_length)
        responses = torch.full((len(rows), width), self.pad_id, dtype=input_ids.dtype)
        response_mask = torch.zeros((len(rows), width), dtype=attention_mask.dtype)
        for i, out in enumerate(outputs):
            tokens = out.token_ids[:width]
            responses[i, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype)
            response_mask[i, : len(tokens)] = 1
        steps = torch.arange(1, width + 1, dtype=position_ids.dtype).unsqueeze(0)
        tensors = {
            "prompts": input_ids,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([input_ids, responses], dim=-1),
            "attention_mask": torch.cat([attention_mask, response_mask], dim=-1),
            "position_ids": torch.cat([position_ids, position_ids[:, -1:] + steps], dim=-1),
        }
        non_tensors = {key: np.repeat(batch.non_tensor_batch[key], self.n) for key in ("data_source", "reward_model")}
        non_tensors["uid"] = np.repeat(np.arange(len(batch)).astype(str).astype(object), self.n)
        return DataProto.from_dict(tensors, non_tensors, {"temperature": float(cfg.temperature)})

    def reward(self, data: Any) -> None:
        import torch

        from verl.utils.reward_score import default_compute_score

        lengths = data.batch["response_mask"].sum(-1).tolist()
        responses = data.batch["responses"]
        scores = torch.zeros(responses.shape, dtype=torch.float32)
        for i, length in enumerate(lengths):
            text = self.tokenizer.decode(responses[i, : int(length)].tolist(), skip_special_tokens=True)
            truth = data.non_tensor_batch["reward_model"][i]["ground_truth"]
            score = default_compute_score(data.non_tensor_batch["data_source"][i], text, truth)
            if length:
                scores[i, int(length) - 1] = float(score)
        data.batch["token_level_scores"] = scores

    def step(self, batch_dict: dict) -> dict[str, float]:
        from verl.protocol import DataProto
        from verl.trainer.ppo import core_algos

        timing: dict[str, float] = {}

        def mark(name: str, start: float) -> float:
            now = time.perf_counter()
            timing[name] = now - start
            return now

        t0 = t = time.perf_counter()
        batch = DataProto.from_single_dict(batch_dict)
        data = self.generate(batch)
        t = mark("gen", t)
        self.reward(data)
        t = mark("reward", t)
        data.meta_info.update({"micro_batch_size": self.log_prob_micro, "use_dynamic_bsz": False})
        if not self.on_policy:  # as the trainer: an on-policy update takes old log-probs from its own forward
            log_probs, _entropy = self.actor.compute_log_prob(data, calculate_entropy=True)
            data.batch["old_log_probs"] = log_probs
        t = mark("old_log_prob", t)
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        algo = self.config.algorithm
        data = core_algos.compute_advantage(
            data,
            adv_estimator=algo.adv_estimator,
            gamma=algo.gamma,
            lam=algo.lam,
            num_repeat=self.n,
            norm_adv_by_std_in_grpo=True,
            config=algo,
        )
        t = mark("adv", t)
        self.actor.update_policy(data)
        self.scheduler.step()
        t = mark("update_actor", t)
        timing["update_weights"] = 0.0
        timing["step"] = t - t0
        timing["score"] = float(data.batch["token_level_scores"].sum(-1).mean())
        timing["response_length"] = float(data.batch["response_mask"].sum(-1).float().mean())
        return timing


def serve_bare(config_overrides: list[str], seed: int) -> None:
    """Child process: build the bare loop, then run one step per ``step`` line on stdin, answering one JSON line."""
    import torch

    torch.set_num_threads(1)
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config

    config, _typed = resolve_config(compose_ppo_config(config_overrides))
    loop = BareLoop(config, seed)
    batches = iter(loop.loader)
    reply = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the protocol
    reply.write(json.dumps({"ready": True, "torch_threads": torch.get_num_threads()}) + "\n")
    reply.flush()
    for index, line in enumerate(sys.stdin, start=1):
        if line.strip() != "step":
            break
        wall_start = time.perf_counter()
        batch_dict = next(batches)
        timing = loop.step(batch_dict)
        timing["wall"] = time.perf_counter() - wall_start
        timing["step_index"] = index
        reply.write(json.dumps(timing) + "\n")
        reply.flush()
    loop.close()


class BareChild:
    """The bare loop in its own process (no Ray, one thread), stepped in lockstep with the framework."""

    def __init__(self, cli: list[str], seed: int) -> None:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--role",
            "bare",
            "--seed",
            str(seed),
            "--overrides-json",
            json.dumps(cli),
        ]
        self.proc = subprocess.Popen(
            cmd,
            env=_child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO_ROOT,
        )
        hello = self._read()
        self.torch_threads = hello["torch_threads"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bare loop process exited (rc={self.proc.wait()}); run it alone to see why")
        return json.loads(line)

    def step(self) -> dict:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ---------------------------------------------------------------------------------------------- orchestration


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def build_trainer(cli: list[str]) -> Any:
    """The trainer exactly as ``main_ppo``'s TaskRunner builds it, but in this process so steps can be timed."""
    import ray

    from verl.single_controller.ray import ResourcePoolManager
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.task_runner import _ray_init_kwargs, build_role_worker_mapping
    from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

    config, _typed = resolve_config(compose_ppo_config(cli))
    if not ray.is_initialized():
        ray.init(**_ray_init_kwargs(config))
    tokenizer = load_tokenizer(config.model, resolve_model_path(config.model))
    mapping, pools, pool_spec = build_role_worker_mapping(config)
    pool_manager = ResourcePoolManager(
        resource_pool_spec=pool_spec, mapping=pools, device=str(config.trainer.get("device", "auto"))
    )
    trainer = RayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        role_worker_mapping=mapping,
        resource_pool_manager=pool_manager,
        reward_fn=load_reward_manager(config, tokenizer),
        val_reward_fn=None,
    )
    trainer.init_workers()
    return trainer


def framework_step_record(metrics: dict, wall: float, index: int) -> dict:
    timing = {stage: float(metrics.get(f"timing_s/{stage}", 0.0)) for stage in (*STAGES, "step")}
    timing["score"] = float(metrics["critic/score/mean"])
    timing["response_length"] = float(metrics["response_length/mean"])
    timing["wall"] = wall
    timing["step_index"] = index
    # The agent-loop layer's own timings (present when the trainer generates through AgentLoopManager).
    timing["agent_loop"] = {
        k: float(v) for k, v in metrics.items() if "agent_loop/" in k and isinstance(v, int | float)
    }
    return timing


def run_lockstep(cli: list[str], steps: int, seed: int) -> tuple[list[dict], list[dict], dict]:
    """Alternate one framework step and one bare step, so load changes on a shared machine hit both alike."""
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    bare = BareChild(cli, seed)
    bare_ready = time.perf_counter() - start
    start = time.perf_counter()
    trainer = build_trainer(cli)
    framework_ready = time.perf_counter() - start
    fw_records, bare_records = [], []
    batches = iter(trainer.train_dataloader)
    try:
        for index in range(1, steps + 1):
            trainer.global_steps = index
            wall_start = time.perf_counter()
            metrics = trainer.fit_step(next(batches))
            fw_records.append(framework_step_record(metrics, time.perf_counter() - wall_start, index))
            bare_records.append(bare.step())
    finally:
        bare.close()
        import ray

        ray.shutdown()
    return (
        fw_records,
        bare_records,
        {"framework_setup_s": framework_ready, "bare_setup_s": bare_ready, "bare_torch_threads": bare.torch_threads},
    )


def run_cli(cli: list[str]) -> dict:
    """The real ``python -m verl.trainer.main_ppo`` run, for its whole-process wall time (start-up included)."""
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *cli]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True, cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"main_ppo failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {"wall_s": time.perf_counter() - start}


def summarize(bare_steps: list[dict], fw_steps: list[dict], warmup: int) -> dict:
    """Median per stage over the steps after ``warmup``; ratio main_ppo / bare."""
    bare_steps = [s for s in bare_steps if s["step_index"] > warmup]
    fw_steps = [s for s in fw_steps if s["step_index"] > warmup]
    if not bare_steps or not fw_steps:
        raise ValueError(f"no measured steps after --warmup {warmup}; raise --steps")
    rows = []
    for stage in (*STAGES, "other", "step", "wall"):

        def value(step: dict, stage: str = stage) -> float:
            if stage == "other":
                return step["step"] - sum(step[s] for s in STAGES)
            return step[stage]

        bare_med = median([value(s) for s in bare_steps])
        fw_med = median([value(s) for s in fw_steps])
        # Per-step ratios (each framework step against the bare step right after it) resist load drift.
        paired = [ratio(value(f), value(b)) for f, b in zip(fw_steps, bare_steps) if value(b) > 0]
        rows.append(
            {
                "stage": stage,
                "bare_s": bare_med,
                "framework_s": fw_med,
                "ratio": ratio(fw_med, bare_med),
                "paired_ratio_median": median(paired) if paired else None,
                "extra_s": fw_med - bare_med,
            }
        )
    return {"rows": rows, "steps_measured": len(fw_steps)}


_STAGE_LABELS = {
    "gen": "generate (gen)",
    "reward": "reward",
    "old_log_prob": "old log-prob",
    "adv": "advantage",
    "update_actor": "update actor",
    "update_weights": "weight sync to rollout",
    "other": "glue inside the step (batch, union, balance)",
    "step": "**step (timing_s/step)**",
    "wall": "**step wall, incl. data + metrics**",
}


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(summary: dict, setup: dict, extra: dict) -> str:
    table = markdown_table(
        ["stage", "bare loop (s)", "main_ppo (s)", "main_ppo / bare", "paired median", "extra (ms)"],
        [
            [
                _STAGE_LABELS[r["stage"]],
                r["bare_s"],
                r["framework_s"],
                _fmt_ratio(r["ratio"]),
                _fmt_ratio(r["paired_ratio_median"]),
                f"{r['extra_s'] * 1e3:.1f}",
            ]
            for r in summary["rows"]
        ],
    )
    wall = summary["rows"][-1]
    headline = wall["paired_ratio_median"]
    verdict = "meets" if headline is not None and headline <= TARGET_RATIO else "misses"
    lines = [
        f"GRPO step, {setup['samples']} samples ({setup['prompts']} prompts x {setup['n']}) of up to "
        f"{setup['response_length']} tokens, tiny model, CPU, 1 torch thread per process, {setup['workers']} "
        f"worker process (Ray worker niceness {setup['ray_worker_niceness']}); steps alternate main_ppo / bare; "
        f"median of {summary['steps_measured']} steps each after "
        f"{setup['warmup']} warm-up steps.",
        "",
        table,
        "",
        f"Total (step wall), median of per-step ratios: {_fmt_ratio(headline)} ({verdict} the {TARGET_RATIO}x "
        f"target); ratio of the medians: {_fmt_ratio(wall['ratio'])}. Each main_ppo step is paired with the bare step "
        "that follows it, so load from other processes on a shared machine affects both alike. "
        f"Set-up before the first step: main_ppo trainer {extra['framework_setup_s']:.1f} s "
        f"(Ray, worker group, model loads), bare loop {extra['bare_setup_s']:.1f} s.",
    ]
    if extra.get("cli_wall_s") is not None:
        lines.append(
            f"`python -m verl.trainer.main_ppo` for the same {setup['steps']} steps, whole process: "
            f"{extra['cli_wall_s']:.1f} s."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="main_ppo worker processes (trainer.n_gpus_per_node)")
    parser.add_argument(
        "--ray-worker-niceness",
        type=int,
        default=None,
        help="RAY_worker_niceness for this run (default: what main_ppo sets); 15 is Ray's own default",
    )
    parser.add_argument(
        "--also-ray-default-niceness",
        action="store_true",
        help="run a second time with Ray's default worker niceness (15) for comparison",
    )
    parser.add_argument("--cli", action="store_true", help="also time the real main_ppo CLI end to end (slow)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra main_ppo override, appended after the benchmark's own (repeatable)",
    )
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--role", choices=("orchestrate", "bare"), default="orchestrate", help=argparse.SUPPRESS)
    parser.add_argument("--overrides-json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "bare":
        serve_bare(json.loads(args.overrides_json), args.seed)
        return None
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")
    os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    variants: list[int | None] = [args.ray_worker_niceness]
    if args.also_ray_default_niceness and args.ray_worker_niceness != RAY_DEFAULT_NICENESS:
        variants.append(RAY_DEFAULT_NICENESS)

    from verl.trainer.demo import demo_cache_dir, prepare_demo_data

    data_file = str(prepare_demo_data(demo_cache_dir())["train"])
    runs, tables = [], []
    for niceness in variants:
        if niceness is not None:
            os.environ["RAY_worker_niceness"] = str(niceness)
        setup = {
            "prompts": args.prompts,
            "n": args.n,
            "samples": args.prompts * args.n,
            "response_length": args.response_length,
            "steps": args.steps,
            "warmup": args.warmup,
            "workers": args.workers,
            "data": data_file,
            "model": "verl:tiny-demo",
        }
        with tempfile.TemporaryDirectory(prefix="bench_fo_") as tmp:
            cli = overrides(
                data_file, args.prompts, args.n, args.response_length, args.steps, tmp, args.workers, args.seed
            ) + list(args.override)
            fw_steps, bare_steps, extra = run_lockstep(cli, args.steps, args.seed)
            extra["cli_wall_s"] = run_cli(cli)["wall_s"] if args.cli else None
        # main_ppo's Ray start-up sets RAY_worker_niceness=0 unless the user set it (verl.trainer.ppo.task_runner).
        setup["ray_worker_niceness"] = os.environ.get("RAY_worker_niceness", f"{RAY_DEFAULT_NICENESS} (Ray default)")
        summary = summarize(bare_steps, fw_steps, args.warmup)
        tables.append(render(summary, setup, extra))
        runs.append(
            {
                "setup": setup,
                "summary": summary,
                "setup_times": extra,
                "main_ppo_overrides": cli,
                "raw": {"bare": bare_steps, "framework": fw_steps},
            }
        )
    table = "\n\n".join(tables)
    print(table)
    payload = {"target_ratio": TARGET_RATIO, "runs": runs}
    paths = write_results(NAME, payload, table, seed=args.seed, out_dir=args.out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


if __name__ == "__main__":
    main()
