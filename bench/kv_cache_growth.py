"""What the hf engine's KV cache saves by decoding into spare columns instead of growing by ``torch.cat``.

``transformers``' ``DynamicLayer`` concatenates every decode step's keys and values onto the cache, copying the
whole cache of the running batch each step. The engine's ``HeadroomLayer`` writes the new column into spare ones
and grows by a fraction of its length when they run out; retiring rows moves them up in place. The baseline here is
the same running batch with a layer that does what ``DynamicLayer`` does (``torch.cat`` per step, a fresh
row-selected tensor per retirement, a concatenation per admission).

Same model, prompts, response lengths and seed for both; variants alternate run by run in one process with one
torch thread, and the median of ``--repeats`` runs counts.

    python bench/kv_cache_growth.py         # writes bench/results/kv_cache_growth.{json,md}
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
from verl.workers.rollout.hf.kv_headroom import HeadroomLayer  # noqa: E402

NAME = "kv_cache_growth"
SEED = 0
HEADROOM = "spare columns (HeadroomLayer, the engine)"
CONCAT = "torch.cat per step (DynamicLayer's way)"
# (name, response lengths, longest response, requests); "equal" asks every request for a quarter of the longest
SCENARIOS = (("mixed", "mixed", 256, 256), ("mixed, long", "mixed", 1024, 128), ("equal", "equal", 2048, 64))


class ConcatLayer(HeadroomLayer):
    """The baseline: every change makes a new tensor of exactly the filled size, as ``DynamicLayer`` does."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.assign(torch.cat([self.keys, key_states], dim=2), torch.cat([self.values, value_states], dim=2))
        return self.keys, self.values

    def keep_rows(self, rows: Sequence[int], drop_columns: int = 0) -> None:
        index = torch.as_tensor(list(rows), dtype=torch.long)
        self.assign(
            self.keys.index_select(0, index)[:, :, drop_columns:],
            self.values.index_select(0, index)[:, :, drop_columns:],
        )

    def append_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        length = max(self.length, int(keys.shape[2]))

        def left_pad(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t.new_zeros(t.shape[0], t.shape[1], length - t.shape[2], t.shape[3]), t], dim=2)

        self.assign(
            torch.cat([left_pad(self.keys), left_pad(keys)]), torch.cat([left_pad(self.values), left_pad(values)])
        )


class ConcatRunningBatch(RunningBatch):
    layer_class = ConcatLayer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    longest = max(s[2] for s in SCENARIOS)
    model = engine_model(args.hidden_size, args.num_layers, max_positions=longest + 64)
    vocab = model.get_input_embeddings().num_embeddings
    variants = {HEADROOM: RunningBatch, CONCAT: ConcatRunningBatch}

    warm_prompts, warm_lengths = make_workload(8, vocab, "mixed", 16, seed=99)
    for batch_class in variants.values():
        run_engine(model, warm_prompts, warm_lengths, 4, 16, batch_class=batch_class)

    results, table = [], []
    for name, lengths_kind, max_len, requests in SCENARIOS:
        prompts, lengths = make_workload(requests, vocab, lengths_kind, max_len, seed=SEED)
        seconds: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(args.repeats):
            for variant, batch_class in variants.items():
                seconds[variant].append(
                    run_engine(model, prompts, lengths, args.max_num_seqs, max_len, batch_class=batch_class)
                )
        baseline = median(seconds[CONCAT])
        for variant, samples in seconds.items():
            value = median(samples)
            tokens_per_s = sum(lengths) / value
            results.append(
                {
                    "scenario": name,
                    "requests": requests,
                    "response_len_max": max(lengths),
                    "response_len_mean": sum(lengths) / len(lengths),
                    "variant": variant,
                    "median_s": value,
                    "tokens_per_s": tokens_per_s,
                    "time_vs_concat": value / baseline,
                    "seconds": samples,
                }
            )
            table.append(
                [
                    name,
                    f"{min(lengths)}/{sum(lengths) / len(lengths):.1f}/{max(lengths)}",
                    requests,
                    variant,
                    value,
                    round(tokens_per_s),
                    value / baseline,
                ]
            )
    title = (
        f"hf engine, {args.max_num_seqs} rows at most, tiny model (hidden {args.hidden_size}, {args.num_layers} "
        f"layers), CPU, {args.threads} torch thread(s); median of {args.repeats} alternating runs."
    )
    headers = [
        "scenario",
        "response len min/mean/max",
        "requests",
        "KV cache",
        "median s",
        "tokens/s",
        "time x torch.cat",
    ]
    markdown = title + "\n\n" + markdown_table(headers, table)
    print(markdown)
    payload = {
        "max_num_seqs": args.max_num_seqs,
        "hidden_size": args.hidden_size,
        "num_layers": args.num_layers,
        "threads": args.threads,
        "repeats": args.repeats,
        "results": results,
    }
    write_results(NAME, payload, markdown, SEED)
    return payload


if __name__ == "__main__":
    main()
