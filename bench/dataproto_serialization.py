"""Pickle round trip of a PPO-sized DataProto versus the floor (one copy of every tensor byte).

Variants, all in one process, median of ``--repeats`` runs each:

- ``floor: one memcpy``: copy every tensor's bytes once into fresh memory (all alive together), the least a
  receiver that must own its memory pays;
- ``raw tensors, torch pickle``: the bare dict of tensors through pickle (what Ray does to plain tensors);
- ``TensorDict, default pickle``: tensordict's own pickling of the batch;
- ``DataProto, out-of-band (Ray path)``: protocol 5 with ``buffer_callback``; the buffers are turned into
  read-only bytes between dumps and loads (untimed, that is Ray's write into its store), so loads pays one copy;
- ``DataProto, out-of-band, writable buffers``: same, buffers handed back writable (zero copies);
- ``DataProto, in-band`` : plain ``pickle.dumps`` (what ``save_to_disk`` writes).

``--ray`` adds ``ray.put`` + ``ray.get`` of the DataProto and of the raw dict (starts a local Ray, ~10-30 s).
Prints a markdown table; writes JSON and the table to ``bench/results/``.

    python bench/dataproto_serialization.py [--rows 512] [--seq 2048] [--repeats 5] [--ray]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

from verl import DataProto

RESULTS = Path(__file__).resolve().parent / "results"


def build(rows: int, seq: int) -> DataProto:
    gen = torch.Generator().manual_seed(0)
    resp = seq // 2
    tensors = {
        "input_ids": torch.randint(0, 32000, (rows, seq), generator=gen),
        "attention_mask": torch.ones(rows, seq, dtype=torch.int64),
        "position_ids": torch.arange(seq).repeat(rows, 1),
        "responses": torch.randint(0, 32000, (rows, resp), generator=gen),
        "response_mask": torch.ones(rows, resp, dtype=torch.bool),
        "old_log_probs": torch.randn(rows, resp, generator=gen),
        "advantages": torch.randn(rows, resp, generator=gen),
        "ref_log_prob": torch.randn(rows, resp, generator=gen).to(torch.bfloat16),
    }
    non_tensors = {"uid": [f"prompt-{i // 8}" for i in range(rows)], "data_source": ["bench"] * rows}
    return DataProto.from_dict(tensors, non_tensors, {"temperature": 1.0})


def median_time(fn: Callable[[], float | None], repeats: int) -> float:
    """``fn`` returns its own timed seconds, or None to be timed whole."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        inner = fn()
        samples.append(inner if inner is not None else time.perf_counter() - start)
    return statistics.median(samples)


def oob_round_trip(dp: DataProto, read_only: bool) -> float:
    buffers: list[pickle.PickleBuffer] = []
    start = time.perf_counter()
    payload = pickle.dumps(dp, protocol=5, buffer_callback=buffers.append)
    dumped = time.perf_counter() - start
    if read_only:  # stands in for Ray copying into its store; not timed
        handed = [memoryview(bytes(buf.raw())) for buf in buffers]
    else:
        handed = buffers
    start = time.perf_counter()
    pickle.loads(payload, buffers=handed)
    return dumped + time.perf_counter() - start


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    try:
        import tensordict

        info["tensordict"] = tensordict.__version__
    except AttributeError:
        pass
    return info


def run(rows: int, seq: int, repeats: int, with_ray: bool) -> dict:
    dp = build(rows, seq)
    raw = {key: dp.batch[key] for key in dp.batch.keys()}
    nbytes = sum(t.numel() * t.element_size() for t in raw.values())

    flat_views = [t.reshape(-1).view(torch.uint8).numpy() for t in raw.values()]

    def floor() -> None:
        copies = [view.copy() for view in flat_views]  # all alive at once, like a decoded batch
        del copies

    def torch_pickle() -> None:
        pickle.loads(pickle.dumps(raw, protocol=5))

    def tensordict_pickle() -> None:
        pickle.loads(pickle.dumps(TensorDict(raw, [rows]), protocol=5))

    def in_band() -> None:
        pickle.loads(pickle.dumps(dp, protocol=5))

    variants: dict[str, Callable[[], float | None]] = {
        "floor: one memcpy": floor,
        "raw tensors, torch pickle": torch_pickle,
        "TensorDict, default pickle": tensordict_pickle,
        "DataProto, out-of-band (Ray path)": lambda: oob_round_trip(dp, read_only=True),
        "DataProto, out-of-band, writable buffers": lambda: oob_round_trip(dp, read_only=False),
        "DataProto, in-band": in_band,
    }
    if with_ray:
        import ray

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        ray.get(ray.put(dp))  # warm the store

        def ray_dataproto() -> None:
            ray.get(ray.put(dp))

        def ray_raw() -> None:
            ray.get(ray.put(raw))

        variants["ray.put/get, DataProto"] = ray_dataproto
        variants["ray.put/get, raw tensors"] = ray_raw
    results = []
    for name, fn in variants.items():
        fn()  # warm-up
        results.append({"variant": name, "seconds": median_time(fn, repeats)})
    if with_ray:
        ray.shutdown()
    floor = results[0]["seconds"]
    for row in results:
        row["vs_floor"] = row["seconds"] / floor
        row["GiB_per_s"] = nbytes / row["seconds"] / 2**30
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(dp, protocol=5, buffer_callback=buffers.append)
    return {
        "benchmark": "dataproto_serialization",
        "machine": machine_info(),
        "config": {"rows": rows, "seq": seq, "repeats": repeats, "tensor_bytes": nbytes},
        "oob_payload_bytes": len(payload),
        "oob_buffer_bytes": sum(buf.raw().nbytes for buf in buffers),
        "results": results,
    }


def markdown(report: dict) -> str:
    cfg = report["config"]
    lines = [
        f"DataProto pickle round trip: {cfg['rows']} rows x {cfg['seq']} tokens, "
        f"{cfg['tensor_bytes'] / 2**20:.1f} MiB of tensors, median of {cfg['repeats']} "
        f"(torch {report['machine']['torch']}, {report['machine']['cpu_count']} CPUs)",
        "",
        "| variant | ms | x floor | GiB/s |",
        "|---|---:|---:|---:|",
    ]
    for row in report["results"]:
        lines.append(
            f"| {row['variant']} | {row['seconds'] * 1e3:.1f} | {row['vs_floor']:.2f} | {row['GiB_per_s']:.2f} |"
        )
    lines += [
        "",
        f"Out-of-band pickle: {report['oob_payload_bytes']} payload bytes in-band, "
        f"{report['oob_buffer_bytes'] / 2**20:.1f} MiB in buffers.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ray", action="store_true", help="also time ray.put/ray.get (starts a local Ray)")
    parser.add_argument("--out", type=Path, default=RESULTS / "dataproto_serialization.json")
    args = parser.parse_args()
    report = run(args.rows, args.seq, args.repeats, args.ray)
    table = markdown(report)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table + "\n")
    print(f"\nwrote {args.out} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
