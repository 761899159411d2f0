"""GPU set: rollout tokens/s and update-step MFU on a Qwen2.5-0.5B-size model with random weights, one GPU.

Run on a machine with a CUDA device (never in CI); without one it prints why and exits 0 without touching
``bench/results/``. ``--smoke`` runs the same code on CPU with a tiny model so the script cannot rot unnoticed
(its numbers mean nothing and are written only to ``--out-dir`` when given).

- rollout: the ``hf`` engine (``HFRolloutServer``, continuous batching) against plain ``model.generate`` in static
  batches of the same size, on the same prompts and exact response lengths (EOS ignored); generated tokens/s.
- update: one ``DataParallelPPOActor.update_policy`` on FSDP2 over a one-GPU mesh (bf16 compute, fp32 master
  weights, as the worker builds it) and the log-prob forward; MFU = model FLOPs / (time x peak), with
  6 x params x tokens for forward + backward and 2 x params x tokens for a forward (attention FLOPs left out, so the
  MFU is a slight under-estimate). Both run twice, with the logits path and with ``model.use_fused_kernels`` (the
  head computes log-probs and entropy per chunk), each with its own peak GPU memory.

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


def make_server(model: Any, response_len: int, max_num_seqs: int) -> Any:
    from verl.workers.rollout.hf.server import HFRolloutServer

    config = SimpleNamespace(
        prompt_length=256, response_length=response_len, max_num_seqs=max_num_seqs, calculate_log_probs=False
    )
    return HFRolloutServer(config, model=model, seed=0)


def time_engine(
    model: Any, prompts: list[list[int]], response_len: int, max_num_seqs: int, server: Any = None
) -> float:
    """Generated-token wall time of ``prompts`` through ``server`` (a new one when None: a new engine thread)."""
    server = server or make_server(model, response_len, max_num_seqs)
    params = {"temperature": 1.0, "max_tokens": response_len, "ignore_eos": True}

    async def go() -> float:
        start = time.perf_counter()
        outs = await asyncio.gather(*(server.generate(p, params, f"r{i}") for i, p in enumerate(prompts)))
        cuda_sync()
        elapsed = time.perf_counter() - start
        if any(len(o.token_ids) != response_len for o in outs):
            raise RuntimeError("engine returned a response of the wrong length with EOS ignored")
        return elapsed

    return asyncio.run(go())


def time_generate(model: Any, prompts: list[list[int]], response_len: int, batch: int) -> float:
    import torch
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    config = GenerationConfig(
        max_new_tokens=response_len,
        min_new_tokens=response_len,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=None,
        pad_token_id=0,
    )
    start = time.perf_counter()
    for begin in range(0, len(prompts), batch):
        chunk = prompts[begin : begin + batch]
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


def make_update_batch(samples: int, prompt_len: int, response_len: int, vocab: int, seed: int) -> Any:
    import numpy as np
    import torch

    from verl.protocol import DataProto

    gen = torch.Generator().manual_seed(seed)
    seq = prompt_len + response_len
    responses = torch.randint(10, vocab, (samples, response_len), generator=gen)
    tensors = {
        "input_ids": torch.cat([torch.randint(10, vocab, (samples, prompt_len), generator=gen), responses], -1),
        "attention_mask": torch.ones(samples, seq, dtype=torch.long),
        "position_ids": torch.arange(seq).repeat(samples, 1),
        "responses": responses,
        "response_mask": torch.ones(samples, response_len, dtype=torch.long),
        "old_log_probs": -torch.rand(samples, response_len, generator=gen) * 5,
        "advantages": torch.randn(samples, response_len, generator=gen),
    }
    uids = np.array([str(i // 8) for i in range(samples)], dtype=object)
    return DataProto.from_dict(tensors, {"uid": uids}, {"temperature": 1.0})


def time_update(shape: dict, device: Any, args: argparse.Namespace, fused: bool = False) -> dict:
    """FSDP2 on a one-rank mesh around the fp32 model, bf16 compute on GPU, exactly as the actor worker wraps it;
    ``fused``: ``model.use_fused_kernels``."""
    import torch

    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.config import FSDPActorConfig
    from verl.workers.fsdp.distributed import build_fsdp_mesh, init_distributed
    from verl.workers.fsdp.fsdp_wrap import apply_fsdp2

    init_distributed(device.type, 0, 1)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build_model(shape, torch.float32, device, args.seed)
    params = sum(p.numel() for p in model.parameters())
    mesh = build_fsdp_mesh(device.type, 1, -1)
    model = apply_fsdp2(model, mesh, param_dtype=torch.bfloat16 if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    micro = args.update_micro_batch
    config = FSDPActorConfig(
        ppo_mini_batch_size=args.update_samples,
        ppo_micro_batch_size_per_gpu=micro,
        ppo_micro_batch_size=None,
        ppo_epochs=1,
        use_remove_padding=False,
        use_fused_kernels=fused,
    )
    actor = DataParallelPPOActor(config, model, optimizer)
    data = make_update_batch(
        args.update_samples, args.update_prompt_len, args.update_response_len, shape["vocab_size"], args.seed
    ).to(device)
    data.meta_info.update({"micro_batch_size": micro, "use_dynamic_bsz": False})
    tokens = args.update_samples * (args.update_prompt_len + args.update_response_len)

    def timed(fn) -> list[float]:
        fn()  # warm-up
        cuda_sync()
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()
            cuda_sync()
            seconds.append(time.perf_counter() - start)
            progress(f"{'fused' if fused else 'logits'} {fn.__name__}: {seconds[-1]:.3f} s")
        return seconds

    def update_policy() -> None:
        actor.update_policy(data)

    def compute_log_prob() -> None:
        actor.compute_log_prob(data)

    update_s = timed(update_policy)
    logprob_s = timed(compute_log_prob)
    return {
        "params": params,
        "tokens": tokens,
        "update_s": update_s,
        "log_prob_s": logprob_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
    }


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shape: exercise the code path only")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--update-samples", type=int, default=64)
    parser.add_argument("--update-micro-batch", type=int, default=8)
    parser.add_argument("--update-prompt-len", type=int, default=256)
    parser.add_argument("--update-response-len", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU, TFLOP/s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    if args.smoke:
        shape, device = SMOKE, torch.device("cpu")
        args.requests, args.response_length, args.max_num_seqs = 8, 8, 4
        args.update_samples, args.update_micro_batch, args.update_prompt_len, args.update_response_len = 8, 4, 8, 8
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
    # Warm-up on the full workload: first runs pay one-time kernel and allocator set-up for each new shape. cuDNN's
    # attention plans are cached per thread and shape, so a new server (a new engine thread) builds them again: the
    # kept server measures the engine as a long-lived rollout replica runs it.
    kept = make_server(model, args.response_length, args.max_num_seqs)
    progress(f"warm-up engine: {time_engine(model, prompts, args.response_length, args.max_num_seqs, kept):.2f} s")
    progress(f"warm-up generate: {time_generate(model, prompts, args.response_length, args.max_num_seqs):.2f} s")
    engine_s, engine_kept_s, generate_s = [], [], []
    for _ in range(args.repeats):
        engine_s.append(time_engine(model, prompts, args.response_length, args.max_num_seqs))
        progress(f"engine, new server: {engine_s[-1]:.2f} s")
        engine_kept_s.append(time_engine(model, prompts, args.response_length, args.max_num_seqs, kept))
        progress(f"engine, kept server: {engine_kept_s[-1]:.2f} s")
    for _ in range(args.repeats):
        generate_s.append(time_generate(model, prompts, args.response_length, args.max_num_seqs))
        progress(f"generate: {generate_s[-1]:.2f} s")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    update = time_update(shape, device, args)
    fused = time_update(shape, device, args, fused=True)

    peak = peak_flops(device_name, args.peak_tflops) if device.type == "cuda" else None
    gen_tokens = args.requests * args.response_length
    rollout_rows = [
        ["hf engine (continuous batching), a new server per run", gen_tokens / median(engine_s), median(engine_s)],
        [
            "hf engine (continuous batching), one server kept across runs",
            gen_tokens / median(engine_kept_s),
            median(engine_kept_s),
        ],
        [f"model.generate, static batches of {args.max_num_seqs}", gen_tokens / median(generate_s), median(generate_s)],
    ]
    update_rows = []
    for variant, result in (("logits", update), ("fused head", fused)):
        for stage, key, factor in (
            ("update_policy (fwd + bwd + AdamW)", "update_s", 6),
            ("compute_log_prob (fwd)", "log_prob_s", 2),
        ):
            seconds = median(result[key])
            flops = factor * result["params"] * result["tokens"] / seconds
            update_rows.append(
                [
                    stage,
                    variant,
                    result["tokens"] / seconds,
                    flops / 1e12,
                    None if peak is None else f"{flops / peak * 100:.1f}%",
                    seconds,
                    result["peak_memory_gib"],
                ]
            )
    markdown = "\n".join(
        [
            f"{device_name}; model: Qwen2.5-0.5B shape{' (smoke: tiny shape)' if args.smoke else ''}, "
            f"{update['params'] / 1e6:.0f}M parameters, random weights; medians of {args.repeats}.",
            "",
            f"Rollout: {args.requests} requests, prompts 32-128 tokens, exactly {args.response_length} response tokens "
            f"each, {args.max_num_seqs} sequences at a time.",
            "",
            markdown_table(["variant", "generated tokens/s", "seconds"], rollout_rows),
            "",
            f"Update: {args.update_samples} samples x {args.update_prompt_len + args.update_response_len} tokens, "
            f"micro-batch {args.update_micro_batch}, FSDP2 on one GPU, bf16 compute; peak "
            f'{"unknown" if peak is None else f"{peak / 1e12:.0f} TFLOP/s"}; "fused head" is '
            "model.use_fused_kernels=true; peak memory is per variant (both stages).",
            "",
            markdown_table(
                ["stage", "variant", "tokens/s", "model TFLOP/s", "MFU", "seconds", "peak memory GiB"], update_rows
            ),
        ]
    )
    print(markdown)
    payload = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "device": device_name,
        "shape": shape,
        "peak_flops": peak,
        "raw": {
            "engine_s": engine_s,
            "engine_kept_s": engine_kept_s,
            "generate_s": generate_s,
            **update,
            "fused": fused,
        },
    }
    return write_unless_smoke(NAME, payload, markdown, args)


if __name__ == "__main__":
    main()
