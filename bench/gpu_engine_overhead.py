"""GPU only: where the hf engine's decode time goes, against ``model.generate`` on the same prompts.

``gpu_suite.py`` found the engine at about half of ``model.generate``'s tokens/s on a GPU, while on CPU the two are
level. This script takes the engine apart on one small workload (static waves of ``--batch`` rows, every response
exactly ``--response-length`` tokens), timing the same decode with one part changed at a time:

- ``engine``: ``HFRolloutServer`` as the rollout replica runs it (a new server per run, so a new engine thread),
  once with the sampler's former per-step read-back of the temperature tensor put back in;
- ``decode loop``: the engine's own ``RunningBatch`` and sampler driven directly on the calling thread (no server,
  no asyncio, no worker thread), then with ``torch.multinomial`` instead of our sampler and with a cache that grows
  by ``torch.cat`` instead of the headroom layer;
- the profiler's per-step counts of kernel launches, host-device copies and synchronisations of three of them.

    python bench/gpu_engine_overhead.py            # needs CUDA; writes bench/results/gpu_engine_overhead.{json,md}
    python bench/gpu_engine_overhead.py --smoke    # CPU, tiny model: checks the code path only
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import gpu_suite  # noqa: E402
from bench.common import markdown_table  # noqa: E402

NAME = "gpu_engine_overhead"
PROFILED_STEPS = 32
COUNTED_EVENTS = (
    "cudaLaunchKernel",
    "cudaStreamSynchronize",
    "cudaMemcpyAsync",
    "cudaDeviceSynchronize",
    "cudaMemsetAsync",
    "aten::item",
    "aten::_local_scalar_dense",
)


def with_temperature_read_back(sampler: Callable) -> Callable:
    """The sampler as it was: it read the temperature tensor back to the host on every step."""

    def sample(logits: Any, state: Any, generator: Any = None) -> Any:
        float(state.temperature[0])
        return sampler(logits, state, generator)

    return sample


def multinomial_sampler(logits: Any, state: Any, generator: Any = None) -> Any:
    import torch

    return torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=generator).squeeze(1), None


def decode_loop(
    model: Any,
    prompts: list[list[int]],
    response_len: int,
    batch: int,
    device: Any,
    batch_class: type | None = None,
    sampler: Callable | None = None,
) -> float:
    """The engine's batch and sampler in static waves on the calling thread; wall seconds."""
    import torch

    from verl.workers.rollout.hf.kv_batch import RunningBatch
    from verl.workers.rollout.hf.sampling import RowSamplingState, SamplingParams, sample_next_tokens

    sampler = sampler or sample_next_tokens
    generator = torch.Generator(device=device).manual_seed(0)
    running = (batch_class or RunningBatch)(model, device)
    params = SamplingParams(max_tokens=response_len, ignore_eos=True)
    start = time.perf_counter()
    with torch.inference_mode():
        for begin in range(0, len(prompts), batch):
            wave = prompts[begin : begin + batch]
            logits = running.admit(wave)
            state = RowSamplingState([params] * len(wave), device)
            for step in range(response_len):
                tokens, _ = sampler(logits, state, generator)
                running.set_last_tokens(slice(None), tokens)
                tokens.tolist()  # the engine reads every step's tokens to find finished rows
                if step < response_len - 1:
                    logits = running.decode()
            running.keep([])
    gpu_suite.cuda_sync()
    return time.perf_counter() - start


def engine(
    model: Any, prompts: list[list[int]], response_len: int, batch: int, sampler: Callable | None = None
) -> float:
    from verl.workers.rollout.hf import server

    original = server.sample_next_tokens
    server.sample_next_tokens = sampler or original
    try:
        return gpu_suite.time_engine(model, prompts, response_len, batch)
    finally:
        server.sample_next_tokens = original


def event_counts(run: Callable[[], Any], cuda: bool) -> dict[str, float]:
    """Per decode step: how often each of ``COUNTED_EVENTS`` happened while ``run`` ran ``PROFILED_STEPS`` steps."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        run()
    return {
        event.key: event.count / PROFILED_STEPS for event in prof.key_averages() if event.key.startswith(COUNTED_EVENTS)
    }


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shape: exercise the code path only")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--response-length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    from bench.kv_cache_growth import ConcatRunningBatch
    from verl.workers.rollout.hf.sampling import sample_next_tokens

    if args.smoke:
        shape, device = gpu_suite.SMOKE, torch.device("cpu")
        args.requests, args.response_length, args.batch, args.repeats = 16, 8, 8, 1
    elif not torch.cuda.is_available():
        print(
            "skipped: gpu_engine_overhead needs a CUDA device (none visible); nothing written. "
            "Use --smoke to check the code."
        )
        return None
    else:
        shape, device = gpu_suite.QWEN25_05B, torch.device("cuda")
    model = gpu_suite.build_model(shape, torch.float32 if args.smoke else torch.bfloat16, device, args.seed).eval()
    prompts = gpu_suite.random_prompts(args.requests, shape["vocab_size"], args.seed)
    batch, length = args.batch, args.response_length

    variants: dict[str, Callable[[list[list[int]], int], float]] = {
        "model.generate": lambda p, r: gpu_suite.time_generate(model, p, r, batch),
        "engine, former temperature read-back": lambda p, r: engine(
            model, p, r, batch, with_temperature_read_back(sample_next_tokens)
        ),
        "engine": lambda p, r: engine(model, p, r, batch),
        "decode loop, our sampler": lambda p, r: decode_loop(model, p, r, batch, device),
        "decode loop, former temperature read-back": lambda p, r: decode_loop(
            model, p, r, batch, device, sampler=with_temperature_read_back(sample_next_tokens)
        ),
        "decode loop, torch.multinomial": lambda p, r: decode_loop(
            model, p, r, batch, device, sampler=multinomial_sampler
        ),
        "decode loop, cache grown by torch.cat": lambda p, r: decode_loop(
            model, p, r, batch, device, batch_class=ConcatRunningBatch
        ),
    }
    steps = -(-args.requests // batch) * length
    seconds: dict[str, list[float]] = {}
    for name, run in variants.items():
        run(prompts[:batch], min(8, length))  # warm-up: one short wave
        seconds[name] = [run(prompts, length) for _ in range(args.repeats)]
        gpu_suite.progress(f"{name}: {min(seconds[name]):.3f} s")
    counts = {
        name: event_counts(lambda n=name: variants[n](prompts[:batch], PROFILED_STEPS), device.type == "cuda")
        for name in ("model.generate", "engine", "decode loop, our sampler")
    }

    rows = [[name, min(times), min(times) / steps * 1e3] for name, times in seconds.items()]
    count_rows = [[name, *(counts[name].get(event, 0.0) for event in COUNTED_EVENTS)] for name in counts]
    device_name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)"
    markdown = "\n".join(
        [
            f"{device_name}; Qwen2.5-0.5B shape{' (smoke: tiny shape)' if args.smoke else ''}, random weights, "
            f"{'float32' if args.smoke else 'bf16'}; "
            f"{args.requests} requests in waves of {batch}, exactly {length} response tokens each ({steps} decode "
            f"steps); best of {args.repeats}.",
            "",
            markdown_table(["variant", "seconds", "ms per decode step"], rows),
            "",
            f"Per decode step, from the profiler ({PROFILED_STEPS} steps of one wave):",
            "",
            markdown_table(["variant", *COUNTED_EVENTS], count_rows),
        ]
    )
    print(markdown)
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "device": device_name,
        "shape": shape,
        "decode_steps": steps,
        "raw": seconds,
        "per_step_events": counts,
    }
    return gpu_suite.write_unless_smoke(NAME, payload, markdown, args)


if __name__ == "__main__":
    main()
