"""GPU rollout set: the hf engine against ``model.generate`` on a Qwen2.5-0.5B-size model with random weights.

Run on a machine with a CUDA device (never in CI); without one it prints why and exits 0 without touching
``bench/results/``. ``--smoke`` runs the same code on CPU with a tiny model so the script cannot rot unnoticed
(its numbers mean nothing and are written only to ``--out-dir`` when given).

- rollout: the ``hf`` engine (``HFRolloutServer``: continuous batching, decode steps replayed as CUDA graphs) against
  plain ``model.generate`` in static batches of the same size, on the same prompts and exact response lengths (EOS
  ignored); generated tokens/s, 256 x 256 tokens and a long-tailed row;
- one decode step split into kernel time and host time: the captured step, the same step eagerly, and the growing
  cache the engine used before.

The update step's MFU is ``bench/gpu_update.py``; ``bench/gpu_check.sh`` runs both and more.

    python bench/gpu_suite.py                 # writes bench/results/gpu_suite.{json,md}
    python bench/gpu_suite.py --smoke         # CPU, tiny model: checks the code path only
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402

NAME = "gpu_suite"

# Qwen2.5-0.5B's shape (config.json of the public checkpoint): ~494M parameters, tied embeddings.
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
}
SMOKE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
    "rope_theta": 10000.0,
}

# Dense bf16 peak (no sparsity) by device name fragment, FLOP/s; override with --peak-tflops.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12}


def peak_flops(device_name: str, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    for fragment, flops in PEAK_BF16.items():
        if fragment in device_name:
            return flops
    return None


def build_model(shape: dict, dtype: Any, device: Any, seed: int) -> Any:
    """A Qwen2 causal LM of ``shape`` with random weights (no download: only the shape is Qwen2.5-0.5B's)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    config = Qwen2Config(**shape, attn_implementation="sdpa")
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device)


def random_prompts(num: int, vocab: int, seed: int) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(32, 129, (num,), generator=gen).tolist()
    return [torch.randint(10, vocab, (n,), generator=gen).tolist() for n in lengths]


def long_tail_lengths(num: int, max_len: int, seed: int) -> list[int]:
    """Response lengths log-uniform in 2..``max_len``, as ``bench/long_tail.py``'s task asks for them."""
    import math

    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    draws = torch.rand(num, generator=gen, dtype=torch.float64).tolist()
    return [min(max_len, int(math.exp(math.log(2) + u * (math.log(max_len + 1) - math.log(2))))) for u in draws]


def make_server(
    model: Any, response_len: int, max_num_seqs: int, enforce_eager: bool = False, static_decode: bool | None = None
) -> Any:
    from verl.workers.rollout.hf.server import HFRolloutServer

    config = SimpleNamespace(
        prompt_length=256,
        response_length=response_len,
        max_num_seqs=max_num_seqs,
        calculate_log_probs=False,
        enforce_eager=enforce_eager,
    )
    return HFRolloutServer(config, model=model, seed=0, static_decode=static_decode)


def time_engine(
    model: Any,
    prompts: list[list[int]],
    response_len: int,
    max_num_seqs: int,
    server: Any = None,
    lengths: list[int] | None = None,
) -> float:
    """Generated-token wall time of ``prompts`` through ``server`` (a new one when None: a new engine thread and,
    on a GPU, new CUDA graphs); ``lengths``: each request's exact response length (default ``response_len``)."""
    server = server or make_server(model, response_len, max_num_seqs)
    lengths = lengths or [response_len] * len(prompts)

    async def go() -> float:
        start = time.perf_counter()
        outs = await asyncio.gather(
            *(
                server.generate(p, {"temperature": 1.0, "max_tokens": n, "ignore_eos": True}, f"r{i}")
                for i, (p, n) in enumerate(zip(prompts, lengths))
            )
        )
        cuda_sync()
        elapsed = time.perf_counter() - start
        if [len(o.token_ids) for o in outs] != list(lengths):
            raise RuntimeError("engine returned a response of the wrong length with EOS ignored")
        return elapsed

    return asyncio.run(go())


def time_generate(
    model: Any, prompts: list[list[int]], response_len: int, batch: int, lengths: list[int] | None = None
) -> float:
    """``model.generate`` over static batches of ``batch`` prompts in order; with ``lengths`` each batch runs to its
    longest response (a static batch cannot let its short rows go), and only each request's own tokens count."""
    import torch
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    start = time.perf_counter()
    for begin in range(0, len(prompts), batch):
        chunk = prompts[begin : begin + batch]
        new_tokens = max(lengths[begin : begin + batch]) if lengths else response_len
        config = GenerationConfig(
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            eos_token_id=None,
            pad_token_id=0,
        )
        width = max(len(p) for p in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(chunk):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        with torch.inference_mode():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
    cuda_sync()
    return time.perf_counter() - start


def profiled_kernel_ms(step: Any, steps: int) -> float:
    """GPU kernel time per call of ``step`` (sum of every kernel's own device time, idle gaps left out)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        cuda_sync()
    total_us = sum(event.self_device_time_total for event in prof.key_averages())
    return total_us / 1000 / steps


def decode_step_split(model: Any, rows: int, prompt_len: int, steps: int, seed: int) -> dict[str, dict[str, float]]:
    """Milliseconds per decode step of ``rows`` rows, read back every step as the engine does, for the captured
    static step, the same step run eagerly and the growing cache; with the GPU kernel time of a step beside its wall
    time, so the difference is what the host costs (launches, read-back)."""
    import torch

    from verl.workers.rollout.hf.decode_graphs import DecodeGraphs
    from verl.workers.rollout.hf.kv_batch import RunningBatch
    from verl.workers.rollout.hf.server import GRAPH_WINDOW_COLUMNS
    from verl.workers.rollout.hf.static_batch import StaticBatch, default_batch_buckets

    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    gen = torch.Generator().manual_seed(seed)
    vocab = int(model.get_input_embeddings().num_embeddings)
    prompts = [torch.randint(10, vocab, (prompt_len,), generator=gen).tolist() for _ in range(rows)]
    max_len = prompt_len + 2 * steps + 8

    def static(capture: bool) -> Any:
        graphs = DecodeGraphs(device, capture=capture)
        return StaticBatch(
            model,
            device,
            max_rows=rows,
            max_model_len=max_len,
            batch_buckets=default_batch_buckets(rows) if capture else None,
            window_granularity=GRAPH_WINDOW_COLUMNS if capture else 1,
            graphs=graphs,
        )

    variants = {
        "captured static step": lambda: static(cuda),
        "eager static step": lambda: static(False),
        "growing cache (before)": lambda: RunningBatch(model, device),
    }
    split = {}
    for name, build in variants.items():
        batch = build()

        def step(batch: Any = batch) -> None:
            tokens = batch.decode().argmax(-1)
            batch.set_last_tokens(slice(None), tokens)
            tokens.tolist()  # the engine reads every step's tokens back to find finished rows

        with torch.inference_mode():
            batch.set_last_tokens(slice(0, None), batch.admit(prompts).argmax(-1))
            for _ in range(3):  # warm-up (and capture)
                step()
            cuda_sync()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            wall_ms = (time.perf_counter() - start) * 1000 / steps
            kernel_ms = profiled_kernel_ms(step, 10) if cuda else None
        split[name] = {"wall_ms": wall_ms, "kernel_ms": kernel_ms}
        progress(f"decode step, {name}: {wall_ms:.2f} ms wall, {kernel_ms} ms of kernels")
        del batch
    return split


def progress(message: str) -> None:
    """One line per timed run on stderr, so a run cut off by a time limit still shows how far it got."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write_unless_smoke(name: str, payload: dict, markdown: str, args: argparse.Namespace) -> dict:
    """Write the result files of a GPU script; a ``--smoke`` run writes only where ``--out-dir`` says."""
    if args.smoke and args.out_dir is None:
        print("\n(smoke run: nothing written)")
        return payload
    paths = write_results(name, payload, markdown, seed=args.seed, out_dir=args.out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return payload


def cuda_sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shape: exercise the code path only")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--long-tail-requests", type=int, default=128)
    parser.add_argument("--long-tail-max", type=int, default=1024, help="longest response of the long-tailed row")
    parser.add_argument("--split-steps", type=int, default=50, help="decode steps timed per variant of the split")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    if args.smoke:
        shape, device = SMOKE, torch.device("cpu")
        args.requests, args.response_length, args.max_num_seqs = 8, 8, 4
        args.long_tail_requests, args.long_tail_max, args.split_steps = 8, 24, 4
        args.repeats = 1
    elif not torch.cuda.is_available():
        print("skipped: gpu_suite needs a CUDA device (none visible); nothing written. Use --smoke to check the code.")
        return None
    else:
        shape, device = QWEN25_05B, torch.device("cuda")
    device_name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)"
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    model = build_model(shape, dtype, device, args.seed).eval()
    prompts = random_prompts(args.requests, shape["vocab_size"], args.seed)
    # Warm-up: first runs pay one-time kernel, allocator and attention-plan set-up for each new shape (cuDNN caches
    # plans per thread and shape). The kept server measures the engine as a long-lived rollout replica runs it
    # (graphs captured once); a new server per run pays its captures inside the timed run.
    kept = make_server(model, args.long_tail_max, args.max_num_seqs)
    progress(f"warm-up engine: {time_engine(model, prompts, args.response_length, args.max_num_seqs, kept):.2f} s")
    first_wave = prompts[: args.max_num_seqs]
    progress(f"warm-up generate: {time_generate(model, first_wave, args.response_length, args.max_num_seqs):.2f} s")
    engine_s, engine_kept_s, generate_s = [], [], []
    for _ in range(args.repeats):
        engine_s.append(time_engine(model, prompts, args.response_length, args.max_num_seqs))
        progress(f"engine, new server: {engine_s[-1]:.2f} s")
        engine_kept_s.append(time_engine(model, prompts, args.response_length, args.max_num_seqs, kept))
        progress(f"engine, kept server: {engine_kept_s[-1]:.2f} s")
    for _ in range(args.repeats):
        generate_s.append(time_generate(model, prompts, args.response_length, args.max_num_seqs))
        progress(f"generate: {generate_s[-1]:.2f} s")

    tail_prompts = random_prompts(args.long_tail_requests, shape["vocab_size"], args.seed + 2)
    tail_lengths = long_tail_lengths(args.long_tail_requests, args.long_tail_max, args.seed)
    tail = {"engine_s": [], "engine_kept_s": [], "generate_s": []}

    def tail_engine(server: Any = None, model: Any = model) -> float:
        return time_engine(model, tail_prompts, args.long_tail_max, args.max_num_seqs, server, tail_lengths)

    def tail_generate(count: int, model: Any = model) -> float:
        return time_generate(model, tail_prompts[:count], args.long_tail_max, args.max_num_seqs, tail_lengths[:count])

    progress(f"warm-up long tail, kept server: {tail_engine(kept):.2f} s")
    progress(f"warm-up long tail, generate (first wave): {tail_generate(args.max_num_seqs):.2f} s")
    for _ in range(args.repeats):
        tail["engine_s"].append(tail_engine())
        progress(f"long tail, new server: {tail['engine_s'][-1]:.2f} s")
        tail["engine_kept_s"].append(tail_engine(kept))
        progress(f"long tail, kept server: {tail['engine_kept_s'][-1]:.2f} s")
        tail["generate_s"].append(tail_generate(len(tail_prompts)))
        progress(f"long tail, generate: {tail['generate_s'][-1]:.2f} s")
    captures = kept.graphs.captures if kept.graphs is not None else 0
    capture_failure = kept.graphs.failure if kept.graphs is not None else None
    if capture_failure:
        progress(f"graph capture failed, the engine decoded eagerly: {capture_failure}")
    del kept
    split = decode_step_split(model, args.max_num_seqs, 128, args.split_steps, args.seed)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    gen_tokens = args.requests * args.response_length
    generate_tps = gen_tokens / median(generate_s)
    tail_tokens = sum(tail_lengths)
    tail_generate_tps = tail_tokens / median(tail["generate_s"])

    def row(name: str, tokens: int, seconds: list[float], baseline: float) -> list:
        return [name, tokens / median(seconds), f"{tokens / median(seconds) / baseline:.2f}x", median(seconds)]

    rollout_rows = [
        row("hf engine, a new server per run (captures included)", gen_tokens, engine_s, generate_tps),
        row("hf engine, one server kept across runs", gen_tokens, engine_kept_s, generate_tps),
        row(f"model.generate, static batches of {args.max_num_seqs}", gen_tokens, generate_s, generate_tps),
    ]
    tail_rows = [
        row("hf engine, a new server per run (captures included)", tail_tokens, tail["engine_s"], tail_generate_tps),
        row("hf engine, one server kept across runs", tail_tokens, tail["engine_kept_s"], tail_generate_tps),
        row(
            f"model.generate, static batches of {args.max_num_seqs}", tail_tokens, tail["generate_s"], tail_generate_tps
        ),
    ]
    split_rows = [
        [
            name,
            values["wall_ms"],
            values["kernel_ms"],
            None if values["kernel_ms"] is None else f"{values['kernel_ms'] / values['wall_ms'] * 100:.0f}%",
        ]
        for name, values in split.items()
    ]
    sections = [
        f"{device_name}; model: Qwen2.5-0.5B shape{' (smoke: tiny shape)' if args.smoke else ''}, random weights; "
        f"medians of {args.repeats}.",
        "",
        f"Rollout: {args.requests} requests, prompts 32-128 tokens, exactly {args.response_length} response tokens "
        f"each, {args.max_num_seqs} sequences at a time; x = tokens/s against model.generate.",
        "",
        markdown_table(["variant", "generated tokens/s", "x generate", "seconds"], rollout_rows),
        "",
        f"Long tail: {args.long_tail_requests} requests, response lengths log-uniform in 2..{args.long_tail_max} "
        f"(mean {tail_tokens / len(tail_lengths):.0f}, EOS ignored), {args.max_num_seqs} at a time; generate runs "
        "each static batch to its longest response, and only each request's own tokens count.",
        "",
        markdown_table(["variant", "generated tokens/s", "x generate", "seconds"], tail_rows),
        "",
        f"One decode step of {args.max_num_seqs} rows (prompts of 128 tokens, tokens read back every step), "
        f"{captures} graphs captured by the kept server"
        + (f" (capture failed: {capture_failure})" if capture_failure else "")
        + ":",
        "",
        markdown_table(["step", "wall ms", "kernel ms", "GPU busy"], split_rows),
    ]
    markdown = "\n".join(sections)
    print(markdown)
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "device": device_name,
        "shape": shape,
        "raw": {
            "engine_s": engine_s,
            "engine_kept_s": engine_kept_s,
            "generate_s": generate_s,
            "long_tail": {**tail, "lengths": tail_lengths},
            "decode_step_split": split,
            "graphs_captured_by_kept_server": captures,
            "graph_capture_failure": capture_failure,
        },
    }
    return write_unless_smoke(NAME, payload, markdown, args)


if __name__ == "__main__":
    main()
