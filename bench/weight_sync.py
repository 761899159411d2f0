"""Weight sync: ``CheckpointEngineManager.update_weights`` per backend against the floor (a local copy of the bytes).

For each model (the tiny kit model, and a ~100M-parameter random Llama unless ``--skip-100m``), in one process
tree, median of ``--repeats`` timed updates after one warm-up each:

- ``floor: local copy``: ``copy_`` every trainer tensor into a preallocated twin in the same process: the least
  any update must do (the bytes have to land in the engine's tensors).
- ``naive``: trainer and hybrid ``hf`` engine in the driver process; buckets loaded in place.
- ``ray``: a trainer actor puts each bucket in the object store; ``--replicas`` standalone ``hf`` replica actors
  fetch and load it.
- ``collective``: the same actors joined by a gloo broadcast group; each bucket is broadcast once.

Every update includes what the manager guarantees: gathering, bucketing, the per-bucket checksums on both sides
and the comparison. ``x floor`` is update time over floor time; GiB/s counts the payload once.

    python bench/weight_sync.py               # writes bench/results/weight_sync.{json,md}
    python bench/weight_sync.py --skip-100m   # the tiny model only (seconds)
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, markdown_table, median, ratio, time_calls, write_results  # noqa: E402

BACKENDS = ("naive", "ray", "collective")
_VERSIONS = itertools.count(1)


class BenchTrainer:
    """Trainer rank 0 holding the model; the body of a Ray actor for ray/collective, a local object for naive."""

    def __init__(
        self,
        model_path: str | None = None,
        model: torch.nn.Module | None = None,
        local_replicas: list[Any] | None = None,
    ):
        if model is None:
            from transformers import AutoModelForCausalLM

            torch.manual_seed(1)
            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
            with torch.no_grad():
                for param in model.parameters():
                    param.add_(torch.randn_like(param) * 0.01)  # the trainer's weights differ from the engine's
        self.model = model
        self.local_replicas = local_replicas

    def ready(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def send_weights(self, request: Any) -> Any:
        from verl.checkpoint_engine import send_weights

        return send_weights(self.model, request, rank=0, local_replicas=self.local_replicas)


def rollout_config():
    from types import SimpleNamespace

    return SimpleNamespace(
        name="hf",
        prompt_length=16,
        response_length=16,
        max_num_seqs=4,
        dtype="float32",
        calculate_log_probs=False,
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        do_sample=False,
        ignore_eos=True,
        max_model_len=None,
    )


def build_models(root: Path, skip_100m: bool) -> dict[str, Path]:
    from verl.utils.tiny_model import build_tiny_model

    models = {"tiny": build_tiny_model(root / "tiny")}
    if not skip_100m:
        # Llama, hidden 768, 14 layers, full-head attention, MLP 2048: 99M parameters (float32: 0.4 GB)
        models["100M"] = build_tiny_model(
            root / "m100",
            hidden_size=768,
            num_hidden_layers=14,
            num_attention_heads=12,
            num_key_value_heads=12,
            intermediate_size=2048,
        )
    return models


def time_floor(model: torch.nn.Module, repeats: int) -> list[float]:
    sources = [t.detach() for t in model.state_dict().values()]
    twins = [torch.empty_like(t) for t in sources]

    def copy_all() -> None:
        for dst, src in zip(twins, sources):
            dst.copy_(src)

    return time_calls(copy_all, repeats)


def bench_model(label: str, path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    import ray
    from transformers import AutoModelForCausalLM

    from verl.checkpoint_engine import CheckpointEngineManager
    from verl.workers.rollout import StandaloneReplica, build_server

    trainer_local = BenchTrainer(str(path))
    params = trainer_local.ready()
    nbytes = sum(t.numel() * t.element_size() for t in trainer_local.model.state_dict().values())
    rows = [
        {
            "model": label,
            "params": params,
            "bytes": nbytes,
            "variant": "floor: local copy",
            "buckets": None,
            "seconds": time_floor(trainer_local.model, args.repeats),
        }
    ]

    def timed(manager: CheckpointEngineManager) -> tuple[list[float], int]:
        last = {}

        def once() -> None:
            last.update(manager.update_weights(next(_VERSIONS)))

        seconds = time_calls(once, args.repeats)
        return seconds, int(last["metrics"]["checkpoint_engine/num_buckets"])

    if "naive" in args.backends:
        engine_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        trainer_local.local_replicas = [build_server(rollout_config(), model=engine_model)]
        manager = CheckpointEngineManager("naive", trainer_local, bucket_megabytes=args.bucket_mb)
        seconds, buckets = timed(manager)
        rows.append(
            {
                "model": label,
                "params": params,
                "bytes": nbytes,
                "variant": "naive",
                "buckets": buckets,
                "seconds": seconds,
            }
        )
        trainer_local.local_replicas = None
        del engine_model
    del trainer_local

    remote = [b for b in ("ray", "collective") if b in args.backends]
    if remote:
        trainer = ray.remote(BenchTrainer).options(num_cpus=0).remote(str(path))
        replicas = [
            StandaloneReplica(rollout_config(), str(path), num_cpus=0, server_kwargs={"device": "cpu"})
            for _ in range(args.replicas)
        ]
        ray.get([trainer.ready.remote()] + [r.actor.get_version.remote() for r in replicas], timeout=600)
        for backend in remote:
            manager = CheckpointEngineManager(backend, trainer, replicas, bucket_megabytes=args.bucket_mb)
            seconds, buckets = timed(manager)
            rows.append(
                {
                    "model": label,
                    "params": params,
                    "bytes": nbytes,
                    "variant": backend,
                    "buckets": buckets,
                    "seconds": seconds,
                }
            )
        for replica in replicas:
            replica.kill()
        ray.kill(trainer)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=1, help="standalone replicas for ray / collective")
    parser.add_argument("--bucket-mb", type=float, default=64.0, help="update_weights_bucket_megabytes")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--skip-100m", action="store_true", help="only the tiny model")
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args()

    import ray

    torch.manual_seed(0)
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT), "TOKENIZERS_PARALLELISM": "false"}},
    )
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, path in build_models(Path(tmp), args.skip_100m).items():
                rows += bench_model(label, path, args)
                print(f"[weight_sync] {label}: done at {time.perf_counter() - start:.0f}s", flush=True)
    finally:
        ray.shutdown()

    table_rows = []
    for row in rows:
        floor = next(r for r in rows if r["model"] == row["model"] and r["variant"].startswith("floor"))
        row["median_s"] = median(row["seconds"])
        row["best_s"] = min(row["seconds"])
        row["x_floor"] = ratio(row["median_s"], median(floor["seconds"]))
        row["gib_per_s"] = ratio(row["bytes"] / 2**30, row["median_s"])
        table_rows.append(
            [
                row["model"],
                f"{row['params'] / 1e6:.2f}M",
                row["bytes"] / 2**20,
                row["variant"],
                row["buckets"],
                row["median_s"] * 1e3,
                row["best_s"] * 1e3,
                row["x_floor"],
                row["gib_per_s"],
            ]
        )
    headers = ["model", "params", "MiB", "variant", "buckets", "median ms", "best ms", "x floor", "GiB/s"]
    markdown = (
        f"Weight sync: update_weights per backend vs a local copy of the same bytes; median of {args.repeats} "
        f"after 1 warm-up; bucket {args.bucket_mb:g} MiB; {args.replicas} standalone replica(s) for ray/collective; "
        f"float32 on CPU (torch {torch.__version__}).\n\n"
        + markdown_table(headers, table_rows)
        + "\n\nEvery update includes bucketing, per-bucket checksums on trainer and replica, and the "
        "check. Run: `python bench/weight_sync.py` (add `--skip-100m` for the tiny model only).\n"
    )
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": rows,
        "total_seconds": time.perf_counter() - start,
    }
    json_path, md_path = write_results("weight_sync", payload, markdown, seed=0, out_dir=args.out_dir)
    print(markdown)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
