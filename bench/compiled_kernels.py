"""Log-probs and entropy of the response logits with and without ``actor.use_torch_compile``, forward and backward.

Every log-prob pass and update computes, per response token, the log-prob of the sampled token
(:func:`~verl.utils.torch_functional.logprobs_from_logits`) and its entropy
(:func:`~verl.utils.torch_functional.entropy_from_logits`). Both work in row chunks and keep one to three numbers
per row for the backward; with ``compiled=True`` each chunk's forward and gradient run as ``torch.compile``d
kernels. Eager and compiled run in one process, interleaved round by round, on the same logits; the median of
``--repeats`` rounds counts, and the first compiled call (which compiles) is reported on its own row.

    python bench/compiled_kernels.py       # writes bench/results/compiled_kernels.{json,md}
    python bench/compiled_kernels.py --tokens 1024 --vocab 32000 151936 --repeats 7
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
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits  # noqa: E402

NAME = "compiled_kernels"
SEED = 0


def functions(labels: torch.Tensor) -> dict[str, Callable[[torch.Tensor, bool], torch.Tensor]]:
    return {
        "log-probs": lambda logits, compiled: logprobs_from_logits(logits, labels, compiled=compiled),
        "entropy": lambda logits, compiled: entropy_from_logits(logits, compiled=compiled),
    }


def forward_backward(fn: Callable, logits: torch.Tensor, compiled: bool) -> float:
    leaf = logits.detach().requires_grad_()
    start = time.perf_counter()
    fn(leaf, compiled).sum().backward()
    return time.perf_counter() - start


def measure(fn: Callable, logits: torch.Tensor, repeats: int) -> dict:
    first_call = forward_backward(fn, logits, True)  # compiles, or takes this process's compiled kernels
    forward_backward(fn, logits, False)
    seconds = {"eager": [], "compiled": []}
    for _ in range(repeats):
        for name in seconds:
            seconds[name].append(forward_backward(fn, logits, name == "compiled"))
    with torch.no_grad():
        difference = (fn(logits, True) - fn(logits, False)).abs().max().item()
    return {"seconds": seconds, "first_compiled_call_s": first_call, "max_abs_difference": difference}


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
        gen = torch.Generator().manual_seed(SEED)
        logits = torch.randn(args.tokens, vocab, generator=gen) * 3.0
        labels = torch.randint(0, vocab, (args.tokens,), generator=gen)
        for function, fn in functions(labels).items():
            result = measure(fn, logits, args.repeats)
            eager, compiled = median(result["seconds"]["eager"]), median(result["seconds"]["compiled"])
            results.append(
                {
                    "vocab": vocab,
                    "function": function,
                    "eager_median_s": eager,
                    "compiled_median_s": compiled,
                    "compiled_vs_eager": compiled / eager,
                    **result,
                }
            )
            table.append(
                [
                    f"{vocab:,}",
                    function,
                    eager * 1000,
                    compiled * 1000,
                    compiled / eager,
                    result["first_compiled_call_s"] * 1000,
                    result["max_abs_difference"],
                ]
            )
    title = (
        f"{args.tokens} tokens' logits, forward and backward, CPU, {args.threads} torch thread(s), float32; "
        f"median of {args.repeats} interleaved rounds."
    )
    markdown = (
        title
        + "\n\n"
        + markdown_table(
            [
                "vocab",
                "function",
                "eager ms",
                "compiled ms",
                "compiled / eager",
                "first compiled call ms",
                "max abs difference",
            ],
            table,
        )
    )
    print(markdown)
    payload = {"tokens": args.tokens, "threads": args.threads, "repeats": args.repeats, "results": results}
    write_results(NAME, payload, markdown, SEED)
    return payload


if __name__ == "__main__":
    main()
