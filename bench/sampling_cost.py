"""Cost of drawing the next token of every row, per decode step, against the stock samplers and the LM head.

The hf rollout engine samples every row of its running batch once per decode step. At a real vocabulary size on a
CPU, how the draw is made decides whether sampling is a rounding error or the larger part of the step:

- ``torch.multinomial`` over the softmax (the stock draw, unseeded);
- Gumbel-max over float64 noise on every token of the vocabulary (how a per-request seed is commonly honoured);
- the engine's ``sample_next_tokens``: one uniform number per row and an inverse CDF, with the rows unseeded (the
  engine's generator) and seeded (a counter-based hash of seed and position);
- for scale, the LM-head matmul of a Qwen2.5-0.5B-size model (hidden 896) that produces those logits.

All in one process with one torch thread, variants interleaved round by round; the median of ``--repeats`` rounds
counts. Ratios are against ``torch.multinomial`` at the same vocabulary.

    python bench/sampling_cost.py          # writes bench/results/sampling_cost.{json,md}
    python bench/sampling_cost.py --vocab 109 32000 151936 --rows 256 --repeats 7
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402
from verl.workers.rollout.hf.sampling import RowSamplingState, SamplingParams, sample_next_tokens  # noqa: E402

NAME = "sampling_cost"
SEED = 0
BASELINE = "torch.multinomial (unseeded)"
HEAD_HIDDEN = 896  # Qwen2.5-0.5B


def variants(rows: int, vocab: int) -> dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(SEED)
    logits = torch.randn(rows, vocab, generator=gen) * 3.0
    hidden = torch.randn(rows, HEAD_HIDDEN, generator=gen)
    head = torch.randn(vocab, HEAD_HIDDEN, generator=gen) / HEAD_HIDDEN**0.5
    unseeded = RowSamplingState([SamplingParams() for _ in range(rows)], torch.device("cpu"))
    seeded = RowSamplingState([SamplingParams(seed=SEED + i) for i in range(rows)], torch.device("cpu"))

    def multinomial() -> object:
        return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)

    def gumbel_full_vocabulary() -> object:
        noise = torch.rand(rows, vocab, generator=gen, dtype=torch.float64).clamp_(min=1e-300)
        return torch.argmax(torch.log_softmax(logits.double(), dim=-1) - torch.log(-torch.log(noise)), dim=-1)

    return {
        BASELINE: multinomial,
        "Gumbel-max, float64 noise on every token": gumbel_full_vocabulary,
        "verl sample_next_tokens, unseeded rows": lambda: sample_next_tokens(logits, unseeded, gen),
        "verl sample_next_tokens, seeded rows": lambda: sample_next_tokens(logits, seeded),
        f"for scale: LM-head matmul, hidden {HEAD_HIDDEN}": lambda: hidden @ head.T,
    }


def measure(rows: int, vocab: int, repeats: int) -> dict[str, list[float]]:
    fns = variants(rows, vocab)
    for fn in fns.values():
        fn()  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[109, 32000, 151936])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    results, table = [], []
    for vocab in args.vocab:
        seconds = measure(args.rows, vocab, args.repeats)
        baseline = median(seconds[BASELINE])
        for name, samples in seconds.items():
            value = median(samples)
            results.append(
                {
                    "vocab": vocab,
                    "variant": name,
                    "median_ms": value * 1000,
                    "vs_multinomial": value / baseline,
                    "seconds": samples,
                }
            )
            table.append([f"{vocab:,}", name, value * 1000, value / baseline])
    title = (
        f"Next-token sampling of {args.rows} rows per decode step, CPU, {args.threads} torch thread(s); "
        f"median of {args.repeats} interleaved rounds."
    )
    markdown = title + "\n\n" + markdown_table(["vocab", "variant", "median ms", "x torch.multinomial"], table)
    print(markdown)
    payload = {"rows": args.rows, "threads": args.threads, "repeats": args.repeats, "results": results}
    write_results(NAME, payload, markdown, SEED)
    return payload


if __name__ == "__main__":
    main()
