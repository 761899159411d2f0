"""DataProto dispatch and MessageQueue hand-over, per sample, against pickling the same tensors once (the floor).

- dispatch: ``RayWorkerGroup`` of ``--workers`` CPU workers; one ``Dispatch.DP_COMPUTE_PROTO`` call that returns its
  shard sends a ``--samples`` batch out (split per rank) and back (concatenated). The floor is one
  ``pickle.dumps`` + ``pickle.loads`` of the batch's tensor bytes (numpy views), what any process boundary pays.
- queue: ``MessageQueue`` (fully async, a Ray actor) hand-over of ``--queue-samples`` one-row DataProtos exactly as
  the rollouter and trainer do it: ``put`` = ``ray.put`` of the sample + queueing its reference, with up to
  ``--in-flight`` puts outstanding; ``get`` = references in chunks of ``--get-chunk`` + one ``ray.get`` of their
  payloads. ``--queue-only`` re-measures just this and keeps the dispatch row of the committed results.
  The floor is one pickle round trip of each sample's tensors (timed on up to 1000 samples, scaled).
  Ray moves tensors as out-of-band buffers, so it can beat this in-band pickle floor on large batches.

Each variant runs ``--repeats`` times after a warm-up; medians are reported.

    python bench/dataproto_dispatch.py      # writes bench/results/dataproto_dispatch.{json,md}
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402

NAME = "dataproto_dispatch"


def make_batch(samples: int, prompt_len: int, response_len: int, seed: int) -> Any:
    """A PPO-shaped batch (what update_actor receives): ids, masks, positions, log-probs, advantages, uids."""
    import numpy as np
    import torch

    from verl.protocol import DataProto

    gen = torch.Generator().manual_seed(seed)
    seq = prompt_len + response_len
    tensors = {
        "input_ids": torch.randint(0, 32000, (samples, seq), generator=gen),
        "attention_mask": torch.ones(samples, seq, dtype=torch.int64),
        "position_ids": torch.arange(seq).repeat(samples, 1),
        "prompts": torch.randint(0, 32000, (samples, prompt_len), generator=gen),
        "responses": torch.randint(0, 32000, (samples, response_len), generator=gen),
        "response_mask": torch.ones(samples, response_len, dtype=torch.int64),
        "old_log_probs": torch.randn(samples, response_len, generator=gen),
        "advantages": torch.randn(samples, response_len, generator=gen),
    }
    uids = np.array([f"uid-{i // 8}" for i in range(samples)], dtype=object)
    return DataProto.from_dict(tensors, {"uid": uids}, {"temperature": 1.0})


def tensor_bytes(data: Any) -> int:
    return sum(t.numel() * t.element_size() for t in data.batch.values())


def pickle_floor(data: Any) -> float:
    """One in-process pickle round trip of the same tensor bytes (and the uid column): the least a transfer costs.

    The tensors are pickled as numpy views of the same memory: torch's own tensor pickling adds a fixed cost per
    tensor (about 1 ms for a one-row sample here, 3x a whole DataProto) that no transport has to pay.
    """
    raw: dict[str, Any] = {key: data.batch[key].numpy() for key in data.batch.keys()}
    raw["uid"] = data.non_tensor_batch["uid"]
    start = time.perf_counter()
    pickle.loads(pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL))
    return time.perf_counter() - start


def echo_worker_cls() -> type:
    from verl.single_controller.base import Dispatch, Worker, register

    class EchoWorker(Worker):
        """Returns its shard untouched: the call measures only transport, split and concat."""

        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def echo(self, data):
            return data

    return EchoWorker


def run_dispatch(data: Any, workers: int, repeats: int) -> dict:
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool([workers], use_gpu=False, name_prefix="bench_dispatch")
    group = RayWorkerGroup(pool, RayClassWithInitArgs(echo_worker_cls()))
    out = group.echo(data)  # warm-up: first call ships the class and opens connections
    if len(out) != len(data):
        raise RuntimeError(f"dispatch returned {len(out)} rows for {len(data)}")
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        group.echo(data)
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds}


def run_queue(samples: list[Any], in_flight: int, get_chunk: int, put_batch: int, repeats: int) -> dict:
    import ray

    from verl.experimental.fully_async_policy.message_queue import (
        MessageQueue,
        by_reference,
        by_reference_many,
        resolve_refs,
    )

    queue = ray.remote(MessageQueue).options(num_cpus=0, max_concurrency=1000).remote(len(samples) + 1)

    def put_each(samples: list[Any]) -> float:
        start = time.perf_counter()
        pending: list[Any] = []
        for sample in samples:
            pending.append(queue.put.remote(by_reference(sample), 60.0))
            if len(pending) >= in_flight:
                ray.get(pending.pop(0))
        ray.get(pending)
        return time.perf_counter() - start

    def put_batched(samples: list[Any]) -> float:
        start = time.perf_counter()
        pending: list[Any] = []
        for first in range(0, len(samples), put_batch):
            refs = by_reference_many(samples[first : first + put_batch])  # as CoalescingQueueWriter does
            pending.append(queue.put_many.remote(refs, 60.0))
            if len(pending) >= max(1, in_flight // put_batch):
                ray.get(pending.pop(0))
        ray.get(pending)
        return time.perf_counter() - start

    def get_all(count: int) -> float:
        start = time.perf_counter()
        got = 0
        while got < count:
            refs = ray.get(queue.get.remote(min(get_chunk, count - got), 60.0))
            got += len(resolve_refs(refs, 60.0))
        return time.perf_counter() - start

    put_each(samples[:1000])  # warm-up
    get_all(1000)
    puts, puts_many, gets, gets_shared = [], [], [], []
    for _ in range(repeats):
        puts.append(put_each(samples))
        gets.append(get_all(len(samples)))
        puts_many.append(put_batched(samples))
        gets_shared.append(get_all(len(samples)))
    ray.kill(queue)
    return {"put_seconds": puts, "put_many_seconds": puts_many, "get_seconds": gets, "get_shared_seconds": gets_shared}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--response-len", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queue-samples", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--get-chunk", type=int, default=256)
    parser.add_argument("--put-batch", type=int, default=64, help="samples per put_many call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--queue-repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument(
        "--queue-only",
        action="store_true",
        help="measure only the queue; the dispatch row is copied from the committed results",
    )
    args = parser.parse_args(argv)
    for name in (
        "samples",
        "workers",
        "queue_samples",
        "in_flight",
        "get_chunk",
        "put_batch",
        "repeats",
        "queue_repeats",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")

    import ray
    import torch

    torch.set_num_threads(1)
    data = make_batch(args.samples, args.prompt_len, args.response_len, args.seed)
    nbytes = tensor_bytes(data)
    previous = None
    if args.queue_only:
        import json

        from bench.common import RESULTS_DIR

        committed = Path(args.out_dir or RESULTS_DIR) / f"{NAME}.json"
        if not committed.is_file():
            parser.error(f"--queue-only keeps the dispatch row of {committed}, which does not exist: run without it")
        previous = json.loads(committed.read_text())
        floor = previous["raw"]["dispatch_floor_s"]
    else:
        floor = [pickle_floor(data) for _ in range(args.repeats + 1)][1:]

    one_row = make_batch(1, args.prompt_len, args.response_len, args.seed + 1)
    queue_items = [one_row] * args.queue_samples
    # Per-sample floor, timed on up to 1000 samples and scaled to the queue's count (tensor pickling is slow enough
    # per object that timing all of them would dominate the run).
    floor_subset = min(args.queue_samples, 1000)
    row_floor = [
        sum(pickle_floor(item) for item in queue_items[:floor_subset]) * args.queue_samples / floor_subset
        for _ in range(args.queue_repeats)
    ]

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=max(args.workers, 2), include_dashboard=False, log_to_driver=False)
    try:
        dispatch = (
            {"seconds": previous["raw"]["dispatch_s"]} if previous else run_dispatch(data, args.workers, args.repeats)
        )
        queue = run_queue(queue_items, args.in_flight, args.get_chunk, args.put_batch, args.queue_repeats)
    finally:
        ray.shutdown()

    d_med, f_med = median(dispatch["seconds"]), median(floor)
    p_med, g_med, rf_med = median(queue["put_seconds"]), median(queue["get_seconds"]), median(row_floor)
    pm_med, gs_med = median(queue["put_many_seconds"]), median(queue["get_shared_seconds"])
    n, q = args.samples, args.queue_samples
    rows = [
        [
            f"dispatch {n} samples to {args.workers} workers and back",
            d_med * 1e3,
            d_med / n * 1e6,
            f_med / n * 1e6,
            f"{d_med / f_med:.1f}x",
        ],
        [
            f"MessageQueue put, {q} one-row samples ({args.in_flight} in flight)",
            p_med * 1e3,
            p_med / q * 1e6,
            rf_med / q * 1e6,
            f"{p_med / rf_med:.1f}x",
        ],
        [
            f"MessageQueue put_many, {args.put_batch} samples per call",
            pm_med * 1e3,
            pm_med / q * 1e6,
            rf_med / q * 1e6,
            f"{pm_med / rf_med:.1f}x",
        ],
        [
            f"MessageQueue get, chunks of {args.get_chunk}, one entry per sample",
            g_med * 1e3,
            g_med / q * 1e6,
            rf_med / q * 1e6,
            f"{g_med / rf_med:.1f}x",
        ],
        [
            f"MessageQueue get, chunks of {args.get_chunk}, entries shared by {args.put_batch}",
            gs_med * 1e3,
            gs_med / q * 1e6,
            rf_med / q * 1e6,
            f"{gs_med / rf_med:.1f}x",
        ],
    ]
    table = markdown_table(["operation", "total (ms)", "per sample (us)", "floor per sample (us)", "x floor"], rows)
    header = (
        f"Batch: {n} samples x {args.prompt_len + args.response_len} tokens, {nbytes / 2**20:.1f} MiB of "
        f"tensors ({nbytes / n / 1024:.1f} KiB per sample); floor = one pickle dumps+loads of the same "
        f"tensor bytes (as numpy arrays) in process; median of {args.repeats} (dispatch) / "
        f"{args.queue_repeats} (queue) runs." + (" Dispatch row from the previous full run." if previous else "")
    )
    markdown = header + "\n\n" + table
    print(markdown)
    payload = {
        "config": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None},
        "tensor_bytes": nbytes,
        "raw": {
            "dispatch_s": dispatch["seconds"],
            "dispatch_floor_s": floor,
            "queue_put_s": queue["put_seconds"],
            "queue_put_many_s": queue["put_many_seconds"],
            "queue_get_shared_s": queue["get_shared_seconds"],
            "queue_get_s": queue["get_seconds"],
            "queue_floor_s": row_floor,
        },
        "rows": [
            dict(zip(["operation", "total_ms", "per_sample_us", "floor_per_sample_us", "x_floor"], r)) for r in rows
        ],
    }
    paths = write_results(NAME, payload, markdown, seed=args.seed, out_dir=args.out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


if __name__ == "__main__":
    main()
