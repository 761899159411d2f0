"""Time and peak memory of scoring responses with ``model.use_fused_kernels`` against the logits path.

Without fused kernels the actor's LM head makes ``[tokens, vocab]`` logits for the response slots, which autograd
keeps for backward; with them the head computes each slot's log-prob and entropy chunk by chunk
(:mod:`verl.utils.fused_linear_logprob`) and backward recomputes each chunk's logits. Same model, same batch, same
actor code, alternating call by call: ``compute_log_prob`` with entropy (the old-log-prob pass) and one
``update_policy`` with an entropy bonus (forward and backward).

Peak memory is the process's resident high-water mark during the call above what was resident before it (Linux:
``/proc/self/clear_refs`` resets the mark before each call; elsewhere it is not reported). Large tensors come
from ``mmap`` and go back to the system when freed, so the mark follows what the call held at once.

Model: a Llama with Qwen2.5's vocabulary (151,936) and a small body (random weights, float32, CPU), where the head
is most of the work, as in ``bench/response_logits.py``.

    python bench/fused_kernels.py      # writes bench/results/fused_kernels.{json,md}
    python bench/fused_kernels.py --rows 4 --response 64 --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402
from bench.response_logits import build_batch, build_model  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402
from verl.workers.config.actor import FSDPActorConfig  # noqa: E402

NAME = "fused_kernels"
SEED = 0
LOGITS, FUSED = "logits (use_fused_kernels=false)", "fused (use_fused_kernels=true)"


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def measured_call(fn) -> tuple[float, float | None]:
    """Seconds of ``fn()`` and the MiB its peak resident memory rose above what was resident before."""
    can_reset = _reset_peak()
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    if not can_reset or before is None or peak is None:
        return seconds, None
    return seconds, (peak - before) / 1024


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    model = build_model(args.vocab, args.hidden, args.layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: both variants keep scoring the same weights
    config = FSDPActorConfig(
        ppo_mini_batch_size=args.rows, ppo_micro_batch_size_per_gpu=args.rows, entropy_coeff=0.01, shuffle=False
    )
    actors = {
        name: DataParallelPPOActor(dataclasses.replace(config, use_fused_kernels=name == FUSED), model, optimizer)
        for name in (LOGITS, FUSED)
    }
    data = build_batch(args.rows, args.prompt, args.response, args.vocab)
    with torch.no_grad():
        data.batch["old_log_probs"] = actors[LOGITS].compute_log_prob(data)[0]
    calls = {
        "compute_log_prob (with entropy)": lambda actor: actor.compute_log_prob(data, calculate_entropy=True),
        "update_policy (entropy bonus)": lambda actor: actor.update_policy(data),
    }
    seconds = {(call, name): [] for call in calls for name in actors}
    peaks = {(call, name): [] for call in calls for name in actors}
    for round_index in range(args.repeats + 1):  # round 0 warms up
        for call, fn in calls.items():
            for name, actor in actors.items():
                elapsed, peak = measured_call(lambda: fn(actor))  # noqa: B023 - called at once
                if round_index:
                    seconds[(call, name)].append(elapsed)
                    peaks[(call, name)].append(peak)
    with torch.no_grad():
        values = {name: actor.compute_log_prob(data, calculate_entropy=True) for name, actor in actors.items()}
    difference = max((values[FUSED][i] - values[LOGITS][i]).abs().max().item() for i in range(2))

    results, table = [], []
    for call in calls:
        base_s = median(seconds[(call, LOGITS)])
        base_peak = _median_or_none(peaks[(call, LOGITS)])
        for name in actors:
            value, peak = median(seconds[(call, name)]), _median_or_none(peaks[(call, name)])
            peak_ratio = peak / base_peak if peak is not None and base_peak else None
            results.append(
                {
                    "call": call,
                    "variant": name,
                    "median_s": value,
                    "vs_logits": value / base_s,
                    "peak_mib": peak,
                    "peak_vs_logits": peak_ratio,
                    "seconds": seconds[(call, name)],
                    "peaks_mib": peaks[(call, name)],
                }
            )
            table.append(
                [
                    call,
                    name,
                    value,
                    value / base_s,
                    "-" if peak is None else round(peak),
                    "-" if peak_ratio is None else peak_ratio,
                ]
            )
    tokens = args.rows * args.response
    title = (
        f"Scoring {args.rows} responses of {args.response} tokens ({tokens} slots, one micro-batch) after "
        f"{args.prompt}-token prompts; Llama, hidden {args.hidden}, {args.layers} layers, vocabulary "
        f"{args.vocab:,}, float32, CPU, {args.threads} torch thread(s); median of {args.repeats} alternating "
        f"calls. Whole float32 logits of the micro-batch: {tokens * args.vocab * 4 / 2**20:.0f} MiB. Largest "
        f"difference between the variants' log-probs and entropies: {difference:.1e}."
    )
    markdown = (
        title
        + "\n\n"
        + markdown_table(
            ["call", "variant", "median s", "x logits", "peak memory above resident (MiB)", "peak x logits"], table
        )
    )
    print(markdown)
    payload = {"args": vars(args), "max_abs_difference": difference, "results": results}
    write_results(NAME, payload, markdown, SEED)
    return payload


def _median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


if __name__ == "__main__":
    main()
