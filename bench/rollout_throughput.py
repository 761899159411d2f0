"""Throughput of the hf rollout engine against plain ``transformers.generate`` and a one-request loop.

Same model, same prompts, same per-request response lengths, same concurrency (``--max-num-seqs``):

- engine: every request is submitted at once to ``HFRolloutServer``; rows join and leave the batch.
- generate: requests in arrival order, ``max-num-seqs`` per ``model.generate`` call, each call running
  to the longest response of its batch (that is how a static batch behaves); only each request's own
  tokens count as useful.
- one-at-a-time: ``model.generate`` per request (measured on a subset; tokens/s is a rate).

Scenarios: "mixed" response lengths (log-uniform over a wide range) and "equal" lengths. EOS is
disabled everywhere so lengths are exactly those asked for. Each variant runs ``--repeats`` times in
this process, interleaved, and the best time counts (the CI machine is shared and noisy).

    python bench/rollout_throughput.py            # writes bench/results/rollout_throughput.{json,md}
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import write_results  # noqa: E402

NAME = "rollout_throughput"
SEED = 0  # the workload's prompts and lengths


def make_workload(num_requests: int, vocab_size: int, lengths: str, max_len: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(8, 33, (num_requests,), generator=gen).tolist()
    prompts = [torch.randint(10, vocab_size, (n,), generator=gen).tolist() for n in prompt_lens]
    if lengths == "equal":
        response_lens = [max_len // 4] * num_requests
    else:
        u = torch.rand(num_requests, generator=gen)
        response_lens = [int(round(math.exp(math.log(4) + x * (math.log(max_len) - math.log(4))))) for x in u.tolist()]
    return prompts, response_lens


def engine_model(hidden_size: int, num_layers: int, max_positions: int):
    """The benchmarks' tiny causal LM (random init, float32, eval mode), built in a temporary folder."""
    from transformers import AutoModelForCausalLM

    from verl.utils.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(
            tmp,
            hidden_size=hidden_size,
            num_hidden_layers=num_layers,
            intermediate_size=2 * hidden_size,
            max_position_embeddings=max_positions,
        )
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def run_engine(
    model,
    prompts,
    response_lens,
    max_num_seqs: int,
    max_len: int,
    min_admit_chunk=None,
    batch_class=None,
    static_decode: bool | None = None,
) -> float:
    """Wall time of the engine on every request at once; ``batch_class`` swaps the running batch (kv_cache_growth);
    ``static_decode=False`` keeps the cache that grows with the longest row (the engine before the static path)."""
    from verl.workers.rollout.hf.server import HFRolloutServer

    config = SimpleNamespace(
        prompt_length=64, response_length=max_len, max_num_seqs=max_num_seqs, calculate_log_probs=False
    )
    server = HFRolloutServer(config, model=model, seed=0, min_admit_chunk=min_admit_chunk, static_decode=static_decode)
    if batch_class is not None:
        server.batch = batch_class(server.model, server.device)

    async def go():
        start = time.perf_counter()
        outputs = await asyncio.gather(
            *[
                server.generate(p, {"temperature": 1.0, "max_tokens": n, "ignore_eos": True}, f"r{i}")
                for i, (p, n) in enumerate(zip(prompts, response_lens))
            ]
        )
        elapsed = time.perf_counter() - start
        assert [len(o.token_ids) for o in outputs] == list(response_lens)
        return elapsed

    return asyncio.run(go())


def _generate_batch(model, prompts, max_new_tokens: int, pad_id: int):
    from transformers import GenerationConfig

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,  # off, as in the engine runs (a GenerationConfig defaults to 50)
        top_p=1.0,
        eos_token_id=None,
        pad_token_id=pad_id,
    )
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert out.shape[1] == width + max_new_tokens
    return out


def run_generate(model, prompts, response_lens, batch_size: int) -> float:
    start = time.perf_counter()
    for begin in range(0, len(prompts), batch_size):
        chunk = slice(begin, begin + batch_size)
        _generate_batch(model, prompts[chunk], max(response_lens[chunk]), pad_id=0)
    return time.perf_counter() - start


def run_one_at_a_time(model, prompts, response_lens) -> float:
    start = time.perf_counter()
    for p, n in zip(prompts, response_lens):
        _generate_batch(model, [p], n, pad_id=0)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--max-response-length", type=int, default=256)
    parser.add_argument("--single-subset", type=int, default=24, help="requests timed for the one-at-a-time loop")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (0 = leave as is); 1 keeps a shared CPU quiet"
    )
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="where rollout_throughput.{json,md} go (default bench/results)"
    )
    parser.add_argument(
        "--sweep-admit", type=str, default="", help="comma list of min_admit_chunk values to time on 'mixed' (extra)"
    )
    parser.add_argument(
        "--compare-growing",
        action="store_true",
        help="also time the engine with the growing cache (static_decode=False), interleaved with the others",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = engine_model(args.hidden_size, args.num_layers, max_positions=512)
    model.generation_config.eos_token_id = None  # lengths are exactly those asked for, in every variant
    vocab = model.get_input_embeddings().num_embeddings

    # warm-up: first calls allocate and pick kernels
    warm_prompts, warm_lens = make_workload(8, vocab, "mixed", 16, seed=99)
    run_engine(model, warm_prompts, warm_lens, 4, 16)
    run_generate(model, warm_prompts, warm_lens, 4)

    rows = []
    for scenario in ("mixed", "equal"):
        prompts, lens = make_workload(args.num_requests, vocab, scenario, args.max_response_length, seed=SEED)
        useful = sum(lens)
        sub = args.single_subset
        times = {"engine": [], "generate": [], "one_at_a_time": []}
        if args.compare_growing:
            times["engine_growing_cache"] = []
        for _ in range(args.repeats):
            times["engine"].append(run_engine(model, prompts, lens, args.max_num_seqs, args.max_response_length))
            if args.compare_growing:
                times["engine_growing_cache"].append(
                    run_engine(model, prompts, lens, args.max_num_seqs, args.max_response_length, static_decode=False)
                )
            times["generate"].append(run_generate(model, prompts, lens, args.max_num_seqs))
            times["one_at_a_time"].append(run_one_at_a_time(model, prompts[:sub], lens[:sub]))
        tps = {
            **({"engine_growing_cache": useful / min(times["engine_growing_cache"])} if args.compare_growing else {}),
            "engine": useful / min(times["engine"]),
            "generate": useful / min(times["generate"]),
            "one_at_a_time": sum(lens[:sub]) / min(times["one_at_a_time"]),
        }
        rows.append(
            {
                "scenario": scenario,
                "num_requests": args.num_requests,
                "useful_tokens": useful,
                "response_len_min": min(lens),
                "response_len_mean": round(useful / len(lens), 1),
                "response_len_max": max(lens),
                "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
                "seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
                "engine_vs_generate": round(tps["engine"] / tps["generate"], 2),
                "engine_vs_one_at_a_time": round(tps["engine"] / tps["one_at_a_time"], 2),
            }
        )
    sweep = {}
    if args.sweep_admit:
        prompts, lens = make_workload(args.num_requests, vocab, "mixed", args.max_response_length, seed=SEED)
        for chunk in [int(c) for c in args.sweep_admit.split(",")]:
            best = min(
                run_engine(model, prompts, lens, args.max_num_seqs, args.max_response_length, chunk)
                for _ in range(args.repeats)
            )
            sweep[chunk] = round(sum(lens) / best, 1)
        print("engine tokens/s on 'mixed' by min_admit_chunk:", sweep)
    result = {
        "model": {"hidden_size": args.hidden_size, "num_layers": args.num_layers, "vocab_size": vocab},
        "max_num_seqs": args.max_num_seqs,
        "max_response_length": args.max_response_length,
        "one_at_a_time_subset": args.single_subset,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "rows": rows,
    }
    if sweep:
        result["engine_tokens_per_s_by_min_admit_chunk"] = sweep
    table = markdown_table(result)
    print(table)
    paths = write_results(NAME, result, table, seed=SEED, out_dir=args.out_dir)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return result


def markdown_table(result: dict) -> str:
    lines = [
        f"{result['rows'][0]['num_requests']} requests per scenario, max_num_seqs={result['max_num_seqs']}, "
        f"best of {result['repeats']} interleaved repeats; engine: the hf continuous-batching engine; generate: "
        "model.generate in static batches of max_num_seqs; one-at-a-time: a subset of requests alone; "
        f"model hidden={result['model']['hidden_size']} "
        f"layers={result['model']['num_layers']}, torch threads={result['torch_threads']}",
        "",
        "| scenario | response len min/mean/max | engine tok/s | generate tok/s | one-at-a-time tok/s "
        "| engine / generate | engine / one-at-a-time |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        tps = row["tokens_per_s"]
        lines.append(
            f"| {row['scenario']} | {row['response_len_min']}/{row['response_len_mean']}/{row['response_len_max']} "
            f"| {tps['engine']} | {tps['generate']} | {tps['one_at_a_time']} "
            f"| {row['engine_vs_generate']}x | {row['engine_vs_one_at_a_time']}x |"
        )
    growing = [row for row in result["rows"] if "engine_growing_cache" in row["tokens_per_s"]]
    if growing:
        lines += ["", "| scenario | engine tok/s, static cache | engine tok/s, growing cache | static / growing |"]
        lines.append("|---|---|---|---|")
        for row in growing:
            tps = row["tokens_per_s"]
            ratio = tps["engine"] / tps["engine_growing_cache"]
            lines.append(f"| {row['scenario']} | {tps['engine']} | {tps['engine_growing_cache']} | {ratio:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
