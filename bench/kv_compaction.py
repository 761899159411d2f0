"""What the hf engine saves by filling finished rows' slots from the end instead of moving every later row up.

On long-tailed generations a row of a large running batch finishes almost every decode step. Retiring it in order
moves the KV cache of every row after it; filling its slot with the batch's last live row (rows decode
independently, so their order is free) moves one row per finished one (``verl.workers.rollout.hf.kv_batch``'s
``compaction_order``). The baseline is the same running batch retiring rows in order.

Same model, prompts, response lengths and seed for both: every request submitted at once to one
``HFRolloutServer`` with room for all of them, as the fully-async rollouter does; variants alternate run by run in
one process with one torch thread, and the median of ``--repeats`` runs counts.

    python bench/kv_compaction.py         # writes bench/results/kv_compaction.{json,md}
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402
from bench.rollout_throughput import engine_model, make_workload, run_engine  # noqa: E402
from verl.workers.rollout.hf.kv_batch import RunningBatch  # noqa: E402

NAME = "kv_compaction"
SEED = 0
FILL_FROM_END = "fill finished slots from the end (the engine)"
IN_ORDER = "move later rows up in order"


class InOrderRetireBatch(RunningBatch):
    """The running batch, retiring rows in their order."""

    def retire(self, alive: Sequence[bool]) -> list[int]:
        order = [row for row, flag in enumerate(alive) if flag]
        self.keep(order)
        return order


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=384, help="requests, all running at once")
    parser.add_argument("--max-response-length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    model = engine_model(args.hidden_size, args.num_layers, max_positions=args.max_response_length + 64)
    vocab = model.get_input_embeddings().num_embeddings
    variants = {FILL_FROM_END: RunningBatch, IN_ORDER: InOrderRetireBatch}

    warm_prompts, warm_lengths = make_workload(8, vocab, "mixed", 16, seed=99)
    for batch_class in variants.values():
        run_engine(model, warm_prompts, warm_lengths, 8, 16, batch_class=batch_class)

    prompts, lengths = make_workload(args.requests, vocab, "mixed", args.max_response_length, seed=SEED)
    seconds: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for variant, batch_class in variants.items():
            seconds[variant].append(
                run_engine(model, prompts, lengths, args.requests, args.max_response_length, batch_class=batch_class)
            )
    baseline = median(seconds[IN_ORDER])
    results, table = [], []
    for variant, samples in seconds.items():
        value = median(samples)
        results.append(
            {
                "variant": variant,
                "median_s": value,
                "tokens_per_s": sum(lengths) / value,
                "speedup_vs_in_order": baseline / value,
                "seconds": samples,
            }
        )
        table.append([variant, value, round(sum(lengths) / value), baseline / value])
    title = (
        f"hf engine, {args.requests} requests at once, response lengths "
        f"{min(lengths)}/{sum(lengths) / len(lengths):.1f}/{max(lengths)} (min/mean/max, log-uniform), tiny model "
        f"(hidden {args.hidden_size}, {args.num_layers} layers), CPU, 1 torch thread; median of {args.repeats} "
        "alternating runs."
    )
    markdown = title + "\n\n" + markdown_table(["retiring rows", "median s", "tokens/s", "speed x in order"], table)
    print(markdown)
    payload = {
        "requests": args.requests,
        "max_response_length": args.max_response_length,
        "hidden_size": args.hidden_size,
        "num_layers": args.num_layers,
        "repeats": args.repeats,
        "response_lengths": lengths,
        "results": results,
    }
    write_results(NAME, payload, markdown, SEED, out_dir=args.out_dir)
    return payload


if __name__ == "__main__":
    main()
