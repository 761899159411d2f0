"""Entropy of the response logits with and without ``actor.use_torch_compile``, forward and backward.

The actor computes the entropy of every response token (a metric in each pass, a loss term with
``entropy_coeff``). :func:`verl.utils.torch_functional.entropy_from_logits` works in row chunks and keeps three
numbers per row for the backward; with ``compiled=True`` each chunk's statistics and gradient run as
``torch.compile``d kernels. Both variants run in one process, interleaved round by round, on the same logits; the
median of ``--repeats`` rounds counts, and the one-time compile is reported separately.

    python bench/compiled_entropy.py       # writes bench/results/compiled_entropy.{json,md}
    python bench/compiled_entropy.py --tokens 1024 --vocab 32000 151936 --repeats 7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402
from verl.utils.torch_functional import entropy_from_logits  # noqa: E402

NAME = "compiled_entropy"
SEED = 0
VARIANTS = {"eager": False, "compiled (use_torch_compile)": True}


def forward_backward(logits: torch.Tensor, compiled: bool) -> float:
    leaf = logits.detach().requires_grad_()
    start = time.perf_counter()
    entropy_from_logits(leaf, compiled=compiled).sum().backward()
    return time.perf_counter() - start


def measure(tokens: int, vocab: int, repeats: int) -> tuple[dict[str, list[float]], float, float]:
    logits = torch.randn(tokens, vocab, generator=torch.Generator().manual_seed(SEED)) * 3.0
    start = time.perf_counter()
    forward_backward(logits, True)  # first use compiles (or takes the kernels from this process's cache)
    first_call = time.perf_counter() - start
    forward_backward(logits, False)
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(repeats):
        for name, compiled in VARIANTS.items():
            seconds[name].append(forward_backward(logits, compiled))
    leaf = logits.detach().requires_grad_()
    eager = entropy_from_logits(leaf)
    difference = (entropy_from_logits(leaf, compiled=True) - eager).abs().max().item()
    return seconds, first_call, difference


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 151936])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    results, table = [], []
    for vocab in args.vocab:
        seconds, first_call, difference = measure(args.tokens, vocab, args.repeats)
        baseline = median(seconds["eager"])
        for name, samples in seconds.items():
            value = median(samples)
            results.append({"vocab": vocab, "variant": name, "median_s": value, "vs_eager": value / baseline,
                            "seconds": samples})
            table.append([f"{vocab:,}", name, value * 1000, value / baseline])
        results.append({"vocab": vocab, "first_compiled_call_s": first_call, "max_abs_difference": difference})
        table.append([f"{vocab:,}", "first compiled call (includes compiling)", first_call * 1000, None])
    title = (f"Entropy of {args.tokens} tokens' logits, forward and backward, CPU, {args.threads} torch thread(s), "
             f"float32; median of {args.repeats} interleaved rounds.")
    markdown = title + "\n\n" + markdown_table(["vocab", "variant", "median ms", "x eager"], table)
    print(markdown)
    payload = {"tokens": args.tokens, "threads": args.threads, "repeats": args.repeats, "results": results}
    write_results(NAME, payload, markdown, SEED)
    return payload


if __name__ == "__main__":
    main()
