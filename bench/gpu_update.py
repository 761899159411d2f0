"""GPU: the PPO update's MFU on one GPU, one change at a time, with each variant's peak memory and profile.

Run on a machine with a CUDA device (never in CI); without one it prints why and exits 0 without touching
``bench/results/``. ``--smoke`` runs every variant's code path on CPU with tiny shapes (numbers meaningless; written
only to ``--out-dir`` when given).

What runs: ``DataParallelPPOActor.update_policy`` over 64 samples of 256 prompt + 768 response slots (one
mini-batch, one optimizer step), on FSDP2 over a one-GPU mesh around a float32 model with bfloat16 compute, as the
actor worker wraps it, for random weights in Qwen2.5-0.5B's and Qwen2.5-1.5B's shapes. Two batches: ``dense``
(every slot a real token, 65,536 tokens: the MFU target's case) and ``long_tail`` (prompts of 64-256 tokens, left
padded; response lengths log-normal around 192, capped at 768, right padded: about 40% of the slots are real).
Variants, each changing one thing:

- ``padded, micro 8``: today's default (fixed micro-batches of 8 rows cut in length order, padded forward);
- ``packed, block mask``: ``use_remove_padding``, transformers' block-diagonal mask (``VERL_PACKED_ATTENTION=mask``);
- ``packed, varlen``: packing with varlen attention (``verl.utils.varlen_attention``: flash-attn if installed,
  else torch's ``varlen_attn``);
- ``N tokens``: ``use_dynamic_bsz`` with ``ppo_max_token_len_per_gpu=N`` (micro-batches by token count);
- ``fused head``: ``use_fused_kernels`` (the head computes log-probs and entropy per chunk, never the logits);
- ``Liger``: ``model.use_liger`` (Liger's RMSNorm/RoPE/SwiGLU kernels; needs ``liger-kernel``).

MFU = 6 x parameters x real tokens / seconds / the GPU's dense bf16 peak (``--peak-tflops`` to override): padding
the GPU computes anyway is not counted, so a padded variant on the long-tail batch is charged for its waste. The
``MFU + attn`` column adds the causal attention FLOPs, 6 x layers x hidden x sum(length^2). Each variant runs one
warm-up step (not under ``--smoke``), ``--repeats`` timed steps (with per-stage GPU and host time: forward,
backward, optimizer step) and one step under ``torch.profiler`` (CUDA activity only): summed kernel time and the
union of kernel intervals (GPU busy) against wall time, kernel launches, synchronisations, and the top kernels
(``--smoke`` profiles two variants, on CPU operators). Every variant is wrapped in try/except
(its error is recorded, the others run); results are rewritten after each variant; variants that would not finish
within ``--budget-s`` are skipped (listed).

    python bench/gpu_update.py                # writes bench/results/gpu_update.{json,md}
    python bench/gpu_update.py --smoke        # CPU, tiny shapes: checks the code paths only
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median  # noqa: E402
from bench.gpu_suite import (  # noqa: E402
    QWEN25_05B,
    SMOKE,
    cuda_sync,
    peak_flops,
    progress,
    write_unless_smoke,
)

NAME = "gpu_update"

# Qwen2.5-1.5B's shape (config.json of the public checkpoint): ~1.54B parameters, tied embeddings.
QWEN25_15B = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
}
SMOKE_15B = {**SMOKE, "hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 3, "num_attention_heads": 6}
SHAPES = {"0.5B": QWEN25_05B, "1.5B": QWEN25_15B}
SMOKE_SHAPES = {"0.5B": SMOKE, "1.5B": SMOKE_15B}
# the share of the time budget after which no new 0.5B variant starts, leaving the rest to the 1.5B rows
FIRST_SHAPE_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class Variant:
    shape: str
    data: str  # "dense" or "long_tail"
    packed: bool = False
    attention: str = "mask"  # packed forwards: "varlen" or "mask" (transformers' block-diagonal mask)
    max_tokens: int | None = None  # use_dynamic_bsz with this ppo_max_token_len_per_gpu; None: micro-batches of rows
    fused: bool = False
    liger: bool = False
    log_prob: bool = False  # also time compute_log_prob with the same settings
    micro: int = 8  # rows per micro-batch without a token budget (--micro-batch)

    @property
    def label(self) -> str:
        parts = ["packed" if self.packed else "padded"]
        if self.packed:
            parts.append("varlen" if self.attention == "varlen" else "block mask")
        if self.max_tokens:
            tokens = self.max_tokens
            parts.append(f"{tokens // 1024}k tokens" if tokens % 1024 == 0 else f"{tokens} tokens")
        else:
            parts.append(f"micro {self.micro}")
        if self.fused:
            parts.append("fused head")
        if self.liger:
            parts.append("Liger")
        return ", ".join(parts)


def plan(args: argparse.Namespace, memory_gib: float) -> list[Variant]:
    """Every variant in the order they run: per shape, the rows the targets are read from first (the baseline and
    the best combination on both batches, then Liger), then the rows that split the gain into its parts (0.5B)."""
    big = memory_gib > 100 or args.smoke  # an H200's 139 GiB, not an H100's 78, holds the larger token budgets
    scale = args.max_tokens / 16384
    variants: list[Variant] = []
    for shape in args.shapes:
        if shape == "0.5B":
            budget = args.max_tokens
        else:  # about 3.6 MB of activations per token: 16k tokens do not fit beside the model on 80 GB
            budget = args.max_tokens if big else int(8192 * scale)
        best = {"packed": True, "attention": "varlen", "max_tokens": budget, "fused": True}
        shape_variants = [
            Variant(shape, "dense", log_prob=True),
            Variant(shape, "dense", **best, log_prob=True),
            Variant(shape, "long_tail"),
            Variant(shape, "long_tail", **best),
            Variant(shape, "dense", **best, liger=True),
        ]
        if shape == "0.5B":
            shape_variants += [
                Variant(shape, "dense", packed=True, attention="varlen", max_tokens=budget),
                Variant(shape, "long_tail", packed=True, attention="mask"),
                Variant(shape, "long_tail", packed=True, attention="varlen"),
                Variant(shape, "long_tail", packed=True, attention="varlen", max_tokens=budget),
            ]
            if big:
                shape_variants.append(Variant(shape, "dense", **{**best, "max_tokens": 2 * budget}))
        variants += [dataclasses.replace(v, micro=args.micro_batch) for v in shape_variants]
    return variants


# ---------------------------------------------------------------------------------------------------------- data


def dense_batch(samples: int, prompt_len: int, response_len: int, vocab: int, seed: int) -> Any:
    """Every slot a real token: ``prompt_len`` prompt and ``response_len`` response tokens per sample."""
    import numpy as np
    import torch

    from verl.protocol import DataProto

    gen = torch.Generator().manual_seed(seed)
    seq = prompt_len + response_len
    input_ids = torch.randint(10, vocab, (samples, seq), generator=gen)
    tensors = {
        "input_ids": input_ids,
        "attention_mask": torch.ones(samples, seq, dtype=torch.long),
        "position_ids": torch.arange(seq).repeat(samples, 1),
        "responses": input_ids[:, prompt_len:],
        "response_mask": torch.ones(samples, response_len, dtype=torch.long),
        "old_log_probs": -torch.rand(samples, response_len, generator=gen) * 5,
        "advantages": torch.randn(samples, response_len, generator=gen),
    }
    uids = np.array([str(i // 8) for i in range(samples)], dtype=object)
    return DataProto.from_dict(tensors, {"uid": uids}, {"temperature": 1.0})


def long_tail_batch(samples: int, prompt_len: int, response_len: int, vocab: int, seed: int) -> Any:
    """Left-padded prompts of ``prompt_len // 4 .. prompt_len`` tokens and right-padded responses whose lengths are
    log-normal around ``response_len // 4`` (a few at ``response_len``), as a rollout of long-tailed answers."""
    import numpy as np
    import torch

    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask

    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(max(1, prompt_len // 4), prompt_len + 1, (samples,), generator=gen)
    spread = torch.exp(0.9 * torch.randn(samples, generator=gen))
    responses = (response_len / 4 * spread).round().clamp(min(16, response_len), response_len).long()
    columns = torch.arange(prompt_len + response_len)
    prompt_real = columns[None, :prompt_len] >= (prompt_len - prompts)[:, None]
    response_real = columns[None, :response_len] < responses[:, None]
    mask = torch.cat([prompt_real, response_real], dim=1).long()
    input_ids = torch.randint(10, vocab, mask.shape, generator=gen) * mask
    response_mask = mask[:, prompt_len:]
    tensors = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": input_ids[:, prompt_len:],
        "response_mask": response_mask,
        "old_log_probs": -torch.rand(samples, response_len, generator=gen) * 5 * response_mask,
        "advantages": torch.randn(samples, response_len, generator=gen) * response_mask,
    }
    uids = np.array([str(i // 8) for i in range(samples)], dtype=object)
    return DataProto.from_dict(tensors, {"uid": uids}, {"temperature": 1.0})


def batch_stats(data: Any) -> dict:
    mask = data.batch["attention_mask"]
    lengths = mask.sum(-1)
    response = data.batch["response_mask"].sum(-1)
    return {
        "samples": int(mask.shape[0]),
        "slots": int(mask.numel()),
        "real_tokens": int(lengths.sum()),
        "response_tokens": int(response.sum()),
        "sum_length_squared": int((lengths.double() ** 2).sum()),
        "response_length_median": float(response.median()),
        "response_length_max": int(response.max()),
    }


def micro_batch_layout(data: Any, variant: Variant) -> dict:
    """How many micro-batches the update cuts and how many token slots their forwards compute (padding included)."""
    from verl.workers.actor.batching import split_micro_batches
    from verl.workers.actor.token_forward import shared_left_padding

    batch = data.batch.select("input_ids", "attention_mask", "position_ids", "responses")
    micros, _ = split_micro_batches(
        batch,
        micro_batch_size=None if variant.max_tokens else variant.micro,
        use_dynamic_bsz=variant.max_tokens is not None,
        max_token_len=variant.max_tokens,
        group_by_length=not variant.packed,
    )
    computed = 0
    for part in micros:
        mask = part["attention_mask"]
        if variant.packed:
            computed += int(mask.sum())
            continue
        width = part["responses"].shape[-1]
        used = mask[:, -width:].any(dim=0).nonzero()
        cut = width - (int(used[-1]) + 1 if len(used) else 1)
        left = shared_left_padding(mask, width)
        computed += mask.shape[0] * (mask.shape[1] - left - cut)
    return {"micro_batches": len(micros), "computed_tokens": computed}


# ------------------------------------------------------------------------------------------------ instrumentation


class StageClock:
    """Per-stage host time and GPU time (CUDA events on the current stream) of one update step: the actor's
    forward hook, every ``Tensor.backward``, and its optimizer step; ``other`` is the rest of the step."""

    STAGES = ("forward", "backward", "optimizer")

    def __init__(self, actor: Any, cuda: bool):
        self.actor, self.cuda = actor, cuda
        self.host: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.events: dict[str, list] = defaultdict(list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        import torch

        start = time.perf_counter()
        if self.cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        try:
            yield
        finally:
            if self.cuda:
                end.record()
                self.events[name].append((begin, end))
            self.host[name] += time.perf_counter() - start
            self.calls[name] += 1

    def _wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return fn(*args, **kwargs)

        return timed

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        import torch

        actor, original_backward = self.actor, torch.Tensor.backward
        actor._forward_hook = self._wrap("forward", actor._forward_hook)
        actor._optimizer_step = self._wrap("optimizer", actor._optimizer_step)
        torch.Tensor.backward = self._wrap("backward", original_backward)
        try:
            with self.stage("step"):
                yield
        finally:
            torch.Tensor.backward = original_backward
            for name in ("_forward_hook", "_optimizer_step"):
                actor.__dict__.pop(name, None)

    def result(self) -> dict:
        """After the step has been synchronised: ms per stage, host and GPU."""
        out = {}
        for name in (*self.STAGES, "step"):
            gpu = sum(b.elapsed_time(e) for b, e in self.events[name]) if self.cuda else None
            out[name] = {"host_ms": self.host[name] * 1e3, "gpu_ms": gpu, "calls": self.calls[name]}
        staged = [out[name] for name in self.STAGES]
        out["other"] = {
            "host_ms": out["step"]["host_ms"] - sum(s["host_ms"] for s in staged),
            "gpu_ms": None if not self.cuda else out["step"]["gpu_ms"] - sum(s["gpu_ms"] for s in staged),
            "calls": 0,
        }
        return out


_LAUNCH_NAMES = ("LaunchKernel", "LaunchCooperativeKernel", "cuLaunch", "cudaGraphLaunch")
_SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def _short_kernel_name(name: str, width: int = 90) -> str:
    name = name.removeprefix("void ").split("(")[0]
    return name if len(name) <= width else name[: width - 3] + "..."


def _busy_ms(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end)`` intervals (µs in, ms out)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total / 1e3


def summarize_trace(events: list[dict], wall_s: float, cuda: bool, top: int = 10) -> dict:
    """Kernel time against wall time from a chrome trace's events (GPU kernels, copies and sets on CUDA; on CPU,
    for ``--smoke``, the operators)."""
    device_cats = ("kernel", "gpu_memcpy", "gpu_memset") if cuda else ("cpu_op",)
    kernels = [e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in device_cats]
    runtime = [e for e in events if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver")]
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in kernels:
        entry = by_name[event.get("name", "?")]
        entry[0] += float(event.get("dur", 0.0))
        entry[1] += 1
    kernel_ms = sum(v[0] for v in by_name.values()) / 1e3
    intervals = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in kernels if "ts" in e]
    busy_ms = _busy_ms(intervals) if cuda else None
    ranked = sorted(by_name.items(), key=lambda item: item[1][0], reverse=True)[:top]
    wall_ms = wall_s * 1e3
    return {
        "wall_ms": wall_ms,
        "kernel_ms": kernel_ms,
        "gpu_busy_ms": busy_ms,
        "gpu_busy_pct": None if busy_ms is None else 100 * busy_ms / wall_ms,
        "kernels": len(kernels),
        "launches": sum(1 for e in runtime if any(n in e.get("name", "") for n in _LAUNCH_NAMES)),
        "syncs": sum(1 for e in runtime if e.get("name", "") in _SYNC_NAMES),
        "top_kernels": [
            {
                "name": _short_kernel_name(name),
                "ms": total / 1e3,
                "pct": 100 * total / 1e3 / kernel_ms if kernel_ms else None,
                "count": count,
            }
            for name, (total, count) in ranked
        ],
    }


def profile_step(step: Callable[[], Any], cuda: bool) -> dict:
    """One step under ``torch.profiler`` (CUDA activity only on a GPU: kernels and runtime calls, no operator
    events, so the trace stays small), read back from its chrome trace."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with tempfile.TemporaryDirectory() as tmp:
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            step()
            cuda_sync()
            wall = time.perf_counter() - start
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return summarize_trace(events, wall, cuda)


# --------------------------------------------------------------------------------------------------- the runs


class Session:
    """One model (built, wrapped, with its optimizer) at a time; rebuilt when the shape or Liger changes, or after
    a variant failed mid-step and may have left FSDP's state half-done."""

    def __init__(self, args: argparse.Namespace, device: Any):
        self.args, self.device = args, device
        self.key: tuple | None = None
        self.model = self.optimizer = None
        self.params = 0
        self.patched: tuple[Any, dict] | None = None  # transformers' Qwen2 module as it was before Liger patched it

    def release(self) -> None:
        import torch

        self.model = self.optimizer = None
        self.key = None
        if self.patched is not None:
            # Liger replaces functions and classes of transformers' Qwen2 module (its RoPE above all) for the whole
            # process; undone here so the rows after a Liger row run transformers' own code again
            module, saved = self.patched
            for name in [name for name in vars(module) if name not in saved]:
                delattr(module, name)
            for name, value in saved.items():
                if vars(module).get(name) is not value:
                    setattr(module, name, value)
            self.patched = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def get(self, shape: dict, shape_name: str, liger: bool) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForCausalLM, Qwen2Config

        from verl.workers.fsdp.distributed import build_fsdp_mesh
        from verl.workers.fsdp.fsdp_wrap import apply_fsdp2
        from verl.workers.fsdp.optimizer import build_optimizer

        key = (shape_name, liger)
        if key == self.key:
            return self.model, self.optimizer
        self.release()
        start = time.perf_counter()
        torch.manual_seed(self.args.seed)
        config = Qwen2Config(**shape, attn_implementation="sdpa")
        with torch.device(self.device):  # initialised where it runs: seconds, not a minute on the host
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model = model.to(self.device)
        self.params = sum(p.numel() for p in model.parameters())
        if liger:
            from transformers.models.qwen2 import modeling_qwen2

            from verl.workers.fsdp.liger import apply_liger

            self.patched = (modeling_qwen2, dict(vars(modeling_qwen2)))
            apply_liger(model)
        mesh = build_fsdp_mesh(self.device.type, 1, -1)
        param_dtype = torch.bfloat16 if self.device.type == "cuda" else None
        self.model = apply_fsdp2(model, mesh, param_dtype=param_dtype)
        self.optimizer = build_optimizer(self.model.parameters(), {"lr": 1e-6, "weight_decay": 0.01})
        self.key = key
        progress(
            f"built {shape_name}{' + Liger' if liger else ''}: {self.params / 1e6:.0f}M parameters in "
            f"{time.perf_counter() - start:.1f} s"
        )
        return self.model, self.optimizer


def run_variant(
    session: Session, variant: Variant, shape: dict, data: Any, args: argparse.Namespace, profile: bool = True
) -> dict:
    import torch

    from verl.utils.varlen_attention import PACKED_ATTENTION_ENV
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.config import FSDPActorConfig

    cuda = session.device.type == "cuda"
    previous_mode = os.environ.get(PACKED_ATTENTION_ENV)
    os.environ[PACKED_ATTENTION_ENV] = variant.attention
    try:
        model, optimizer = session.get(shape, variant.shape, variant.liger)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        config = FSDPActorConfig(
            ppo_mini_batch_size=args.samples,
            ppo_micro_batch_size_per_gpu=variant.micro,
            ppo_micro_batch_size=None,
            ppo_epochs=1,
            use_remove_padding=variant.packed,
            use_fused_kernels=variant.fused,
            use_dynamic_bsz=variant.max_tokens is not None,
            ppo_max_token_len_per_gpu=variant.max_tokens or 16384,
            log_prob_use_dynamic_bsz=variant.max_tokens is not None,
            log_prob_max_token_len_per_gpu=variant.max_tokens or 16384,
            log_prob_micro_batch_size_per_gpu=variant.micro,
        )
        actor = DataParallelPPOActor(config, model, optimizer)

        def step() -> None:
            actor.update_policy(data)

        if not args.smoke:  # warm-up: first use of each shape pays kernel selection and allocator growth
            step()
            cuda_sync()
        seconds, stages = [], []
        for _ in range(args.repeats):
            clock = StageClock(actor, cuda)
            start = time.perf_counter()
            with clock.around():
                step()
            cuda_sync()
            seconds.append(time.perf_counter() - start)
            stages.append(clock.result())
        progress(f"{variant.shape} {variant.data} [{variant.label}]: update {median(seconds):.3f} s")
        result: dict[str, Any] = {"update_s": seconds, "stages": stages[-1]}
        if profile:
            result["profile"] = profile_step(step, cuda)
        if variant.log_prob:
            if not args.smoke:
                actor.compute_log_prob(data)
                cuda_sync()
            start = time.perf_counter()
            actor.compute_log_prob(data)
            cuda_sync()
            result["log_prob_s"] = [time.perf_counter() - start]
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        result["params"] = session.params
        return result
    finally:
        if previous_mode is None:
            os.environ.pop(PACKED_ATTENTION_ENV, None)
        else:
            os.environ[PACKED_ATTENTION_ENV] = previous_mode


def check_varlen_kernel(device: Any, heads: int = 14, kv_heads: int = 2, dim: int = 64) -> dict:
    """The packed attention kernel of ``device`` in bf16 against the float32 per-sequence reference, output and
    gradients (max error relative to the reference's largest value): a wrong causal flag, scale or head grouping
    shows up as an error of order 1, bf16 rounding as about 1e-2."""
    import torch

    from verl.utils import varlen_attention as va

    gen = torch.Generator(device=device).manual_seed(0)
    lengths = [100, 150, 50]
    cu = torch.tensor([0, 100, 250, 300], dtype=torch.int32, device=device)
    tensors = [
        torch.randn(sum(lengths), h, dim, device=device, generator=gen, dtype=torch.bfloat16)
        for h in (heads, kv_heads, kv_heads)
    ]
    low = [t.clone().requires_grad_() for t in tensors]
    high = [t.float().requires_grad_() for t in tensors]
    out = va.varlen_attention(*low, cu, max(lengths), scale=dim**-0.5)
    ref = va._reference_varlen(*high, cu, dim**-0.5)
    weight = torch.randn(ref.shape, device=device, generator=gen)
    (out.float() * weight).sum().backward()
    (ref * weight).sum().backward()

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b).abs().max() / b.abs().max())

    return {
        "kernel": va.varlen_kernel_name(device),
        "output_rel_err": rel(out, ref),
        "grad_rel_err": max(rel(a.grad, b.grad) for a, b in zip(low, high)),
    }


def check_packed_log_probs(model: Any, shape: dict, args: argparse.Namespace, device: Any) -> dict:
    """Log-probs and entropy of 8 long-tailed samples through the packed forward (block mask, varlen) against the
    padded forward on the benchmark's own model: the block-mask row is bf16's noise floor for the varlen row."""
    import torch

    from verl.utils.varlen_attention import PACKED_ATTENTION_ENV
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.config import FSDPActorConfig

    data = long_tail_batch(8, args.prompt_len, args.response_len, shape["vocab_size"], args.seed + 1).to(device)
    mask = data.batch["response_mask"].bool()
    previous_mode = os.environ.get(PACKED_ATTENTION_ENV)
    results = {}
    try:
        for name, mode, packed in (("padded", "mask", False), ("block_mask", "mask", True), ("varlen", "varlen", True)):
            os.environ[PACKED_ATTENTION_ENV] = mode
            config = FSDPActorConfig(use_remove_padding=packed, log_prob_micro_batch_size_per_gpu=8)
            results[name] = DataParallelPPOActor(config, model).compute_log_prob(data, calculate_entropy=True)
    finally:
        if previous_mode is None:
            os.environ.pop(PACKED_ATTENTION_ENV, None)
        else:
            os.environ[PACKED_ATTENTION_ENV] = previous_mode
    padded_lp, padded_ent = results["padded"]
    out = {}
    for name in ("block_mask", "varlen"):
        lp, ent = results[name]
        out[f"{name}_log_prob_max_abs"] = float((lp - padded_lp)[mask].abs().max())
        out[f"{name}_entropy_max_abs"] = float((ent - padded_ent)[mask].abs().max())
    out["log_prob_mean"] = float(padded_lp[mask].mean())
    del results
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def flops_of(shape: dict, stats: dict, params: int, factor: int) -> tuple[float, float]:
    """(model FLOPs, causal attention FLOPs) of ``factor`` x (2 fwd, 6 fwd+bwd) the real tokens."""
    model = factor * params * stats["real_tokens"]
    attention = factor * shape["num_hidden_layers"] * shape["hidden_size"] * stats["sum_length_squared"]
    return model, attention


# ------------------------------------------------------------------------------------------------------ report


def render(payload: dict) -> str:
    peak = payload["peak_flops"]
    rows, profile_rows, kernel_rows = [], [], []
    for record in payload["variants"]:
        v, status = record["variant"], record["status"]
        stats = payload["data"][v["shape"]][v["data"]]
        head = [v["shape"], v["data"], record["label"]]
        if status != "ok":
            rows.append([*head, "update", None, None, None, None, None, None, None, None, status])
            continue
        layout = record["layout"]
        for stage, key, factor in (("update", "update_s", 6), ("log-prob", "log_prob_s", 2)):
            if key not in record:
                continue
            seconds = median(record[key])
            model, attention = flops_of(payload["shapes"][v["shape"]], stats, record["params"], factor)
            rows.append(
                [
                    *head,
                    stage,
                    layout["micro_batches"],
                    f"{layout['computed_tokens'] / stats['real_tokens']:.2f}",
                    seconds,
                    stats["real_tokens"] / seconds,
                    model / seconds / 1e12,
                    None if peak is None else f"{100 * model / seconds / peak:.1f}%",
                    None if peak is None else f"{100 * (model + attention) / seconds / peak:.1f}%",
                    record.get("peak_memory_gib"),
                    "ok",
                ]
            )
        prof, stages = record.get("profile"), record["stages"]

        def split(kind: str, stages: dict = stages) -> str:
            values = [stages[name][kind] for name in ("forward", "backward", "optimizer", "other")]
            return "-" if None in values else " / ".join(f"{x:.0f}" for x in values)

        profile_rows.append(
            [
                *head,
                None if prof is None else prof["wall_ms"],
                None if prof is None else prof["kernel_ms"],
                None if prof is None or prof["gpu_busy_pct"] is None else f"{prof['gpu_busy_pct']:.0f}%",
                None if prof is None else prof["kernels"],
                None if prof is None else prof["launches"],
                None if prof is None else prof["syncs"],
                split("gpu_ms"),
                split("host_ms"),
            ]
        )
        for kernel in [] if prof is None else prof["top_kernels"]:
            pct = None if kernel["pct"] is None else f"{kernel['pct']:.1f}%"
            kernel_rows.append(
                [v["shape"], v["data"], record["label"], kernel["name"], kernel["ms"], pct, kernel["count"]]
            )
    env, cfg = payload["environment"], payload["config"]
    lines = [
        f"{payload['device']}; torch {env['torch']}, transformers {env['transformers']}; packed attention kernel: "
        f"{env['varlen_kernel']}; flash-attn {'installed' if env['flash_attn'] else 'not installed'}; liger-kernel "
        f"{'installed' if env['liger_kernel'] else 'not installed'}; peak "
        f"{'unknown' if peak is None else f'{peak / 1e12:.0f} TFLOP/s'} (dense bf16); {payload['config']['repeats']} "
        "timed step(s) per variant.",
        "",
        f"One update_policy: one optimizer step over {cfg['samples']} samples x ({cfg['prompt_len']} prompt + "
        f"{cfg['response_len']} response) slots; FSDP2 on one GPU, float32 master weights, bf16 compute, random "
        "weights. MFU counts 6 x parameters x real tokens (padding not counted); MFU + attn adds 6 x layers x "
        "hidden x sum(length^2); log-prob rows count 2 x. 'computed / real' is the token slots the forwards compute "
        "(padding included) per real token.",
        "",
    ]
    for shape, kinds in payload["data"].items():
        for kind, stats in kinds.items():
            lines.append(
                f"- {shape} {kind}: {stats['real_tokens']} real tokens of {stats['slots']} slots, "
                f"{stats['response_tokens']} response tokens, response length median "
                f"{stats['response_length_median']:.0f} max {stats['response_length_max']}"
            )
    checks = payload.get("checks", {})
    kernel = checks.get("varlen_kernel", {})
    if "error" in kernel:
        lines.append(f"- varlen kernel check failed: {kernel['error']}")
    elif kernel:
        lines.append(
            f"- varlen kernel check ({kernel['kernel']}, bf16 vs float32 reference): output rel. error "
            f"{kernel['output_rel_err']:.2g}, gradients {kernel['grad_rel_err']:.2g}"
        )
    for shape, check in checks.get("packed_log_probs", {}).items():
        if "error" in check:
            lines.append(f"- {shape} packed log-prob check failed: {check['error']}")
            continue
        lines.append(
            f"- {shape} packed vs padded forward, 8 long-tailed samples, max |difference| of log-probs / entropy: "
            f"block mask {check['block_mask_log_prob_max_abs']:.2g} / {check['block_mask_entropy_max_abs']:.2g}, "
            f"varlen {check['varlen_log_prob_max_abs']:.2g} / {check['varlen_entropy_max_abs']:.2g} "
            f"(mean log-prob {check['log_prob_mean']:.3g})"
        )
    lines += [
        "",
        markdown_table(
            [
                "shape",
                "data",
                "variant",
                "stage",
                "micro-batches",
                "computed / real",
                "seconds",
                "real tokens/s",
                "model TFLOP/s",
                "MFU",
                "MFU + attn",
                "peak GiB",
                "status",
            ],
            rows,
        ),
        "",
        "Profile of one update step: wall time; summed kernel time (kernels, copies, sets); GPU busy = the union of "
        "kernel intervals over the wall time (the rest is the GPU waiting on the host: launches, synchronisations); "
        "kernel launches and host synchronisations counted by the profiler; per-stage GPU time (CUDA events) and host "
        "time of forward / backward / optimizer step / the rest, ms, from a timed step.",
        "",
        markdown_table(
            [
                "shape",
                "data",
                "variant",
                "wall ms",
                "kernel ms",
                "GPU busy",
                "kernels",
                "launches",
                "syncs",
                "GPU ms fwd / bwd / opt / other",
                "host ms fwd / bwd / opt / other",
            ],
            profile_rows,
        ),
        "",
        "Top kernels by time in the profiled step:",
        "",
        markdown_table(["shape", "data", "variant", "kernel", "ms", "% of kernel time", "calls"], kernel_rows),
    ]
    if payload.get("skipped"):
        lines += ["", "Not run (time budget): " + "; ".join(payload["skipped"])]
    return "\n".join(lines)


def environment() -> dict:
    import importlib.util

    import torch
    import transformers

    from verl.utils.varlen_attention import varlen_kernel_name

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "varlen_kernel": varlen_kernel_name(device),
        "flash_attn": importlib.util.find_spec("flash_attn") is not None,
        "liger_kernel": importlib.util.find_spec("liger_kernel") is not None,
    }


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: exercise every variant's code path")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--response-len", type=int, default=768)
    parser.add_argument("--max-tokens", type=int, default=16384, help="ppo_max_token_len_per_gpu of the token rows")
    parser.add_argument("--repeats", type=int, default=1, help="timed update steps per variant (after one warm-up)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled step of each variant")
    parser.add_argument(
        "--budget-s", type=float, default=120.0, help="start no variant predicted to end past this many seconds"
    )
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU, TFLOP/s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()

    import torch

    if args.smoke:
        device, shapes = torch.device("cpu"), SMOKE_SHAPES
        args.samples, args.micro_batch, args.prompt_len, args.response_len = 8, 4, 8, 8
        args.max_tokens, args.repeats = 48, 1
    elif not torch.cuda.is_available():
        print("skipped: gpu_update needs a CUDA device (none visible); nothing written. Use --smoke to check the code.")
        return None
    else:
        device, shapes = torch.device("cuda"), SHAPES

    import torch.distributed as dist

    from verl.workers.fsdp.distributed import init_distributed

    own_group = not dist.is_initialized()  # destroyed on the way out, so an in-process caller is left as it was
    init_distributed(device.type, 0, 1)
    threads = torch.get_num_threads()
    if args.smoke:  # tiny matmuls on a shared CPU: one thread, not a fight over cores
        torch.set_num_threads(1)
    device_name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)"
    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30 if device.type == "cuda" else 0.0
    variants = plan(args, memory_gib)
    data, batches = {}, {}
    for shape_name in args.shapes:
        vocab = shapes[shape_name]["vocab_size"]
        dense = dense_batch(args.samples, args.prompt_len, args.response_len, vocab, args.seed)
        tail = long_tail_batch(args.samples, args.prompt_len, args.response_len, vocab, args.seed)
        batches[shape_name] = {"dense": dense, "long_tail": tail}
        data[shape_name] = {kind: batch_stats(batch) for kind, batch in batches[shape_name].items()}
    payload: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "device": device_name,
        "device_memory_gib": memory_gib,
        "environment": environment(),
        "peak_flops": peak_flops(device_name, args.peak_tflops) if device.type == "cuda" else None,
        "shapes": {name: shapes[name] for name in args.shapes},
        "data": data,
        "checks": {"packed_log_probs": {}},
        "variants": [],
        "skipped": [],
    }
    try:
        payload["checks"]["varlen_kernel"] = check_varlen_kernel(device)
    except Exception as err:  # noqa: BLE001 - recorded; the varlen rows will fail on their own and say why
        payload["checks"]["varlen_kernel"] = {"error": f"{type(err).__name__}: {err}"[:400]}
    progress(f"varlen kernel check: {payload['checks']['varlen_kernel']}")

    def write(final: bool) -> None:
        try:
            markdown = render(payload)
        except Exception:  # noqa: BLE001 - the JSON holds every number; a table bug must not lose them
            markdown = "rendering the tables failed:\n\n```\n" + traceback.format_exc() + "```"
        if final:
            print(markdown)
            write_unless_smoke(NAME, payload, markdown, args)
        elif not args.smoke:  # after each variant, so a run cut short keeps what it measured
            with contextlib.redirect_stdout(sys.stderr):
                write_unless_smoke(NAME, payload, markdown, args)

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    previous_handler = signal.signal(signal.SIGTERM, stop)  # a time limit's SIGTERM still writes what was measured
    session = Session(args, device)
    took: dict[str, float] = {}  # the last variant's seconds per shape, to predict the next one (rows get faster)
    try:
        for index, variant in enumerate(variants):
            elapsed = time.perf_counter() - started
            limit = args.budget_s * (FIRST_SHAPE_SHARE if variant.shape == args.shapes[0] != args.shapes[-1] else 1.0)
            # a shape's first row (model build, checks, log-prob timing) is guessed at 20 s, later ones from the last
            if not args.smoke and elapsed + 1.25 * took.get(variant.shape, 16.0) > limit:
                payload["skipped"].append(f"{variant.shape} {variant.data} [{variant.label}]")
                progress(f"skipped (time budget): {variant.shape} {variant.data} [{variant.label}]")
                continue
            record: dict[str, Any] = {"variant": dataclasses.asdict(variant), "label": variant.label}
            if variant.liger and (device.type != "cuda" or not payload["environment"]["liger_kernel"]):
                record["status"] = "skipped: Liger needs liger-kernel and a CUDA device"
                payload["variants"].append(record)
                continue
            begin = time.perf_counter()
            checked = payload["checks"]["packed_log_probs"]
            if variant.shape not in checked:  # once per shape, on the model the rows of that shape time
                try:
                    model, _ = session.get(shapes[variant.shape], variant.shape, variant.liger)
                    checked[variant.shape] = check_packed_log_probs(model, shapes[variant.shape], args, device)
                except Exception as err:  # noqa: BLE001
                    checked[variant.shape] = {"error": f"{type(err).__name__}: {err}"[:400]}
                    session.release()
                progress(f"packed log-prob check, {variant.shape}: {checked[variant.shape]}")
            batch = batches[variant.shape][variant.data]
            try:
                record["layout"] = micro_batch_layout(batch, variant)
                # --smoke profiles two variants: the profiler's code path is the same for every variant
                profile = not args.no_profile and (index < 2 or not args.smoke)
                record.update(run_variant(session, variant, shapes[variant.shape], batch.to(device), args, profile))
                record["status"] = "ok"
            except Exception as err:  # noqa: BLE001 - one variant's failure (OOM, a missing kernel) is a result
                first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
                record["status"] = f"error: {type(err).__name__}: {first_line[:200]}"
                record["traceback"] = traceback.format_exc()[-4000:]
                progress(f"{variant.shape} {variant.data} [{variant.label}] failed: {record['status']}")
                session.release()  # FSDP's state may be half-way through a step: the next variant rebuilds
            record["seconds_total"] = time.perf_counter() - begin
            took[variant.shape] = record["seconds_total"]
            payload["variants"].append(record)
            write(final=False)
    finally:
        payload["total_s"] = time.perf_counter() - started
        session.release()
        write(final=True)
        progress(f"done in {payload['total_s']:.0f} s")
        signal.signal(signal.SIGTERM, previous_handler)
        torch.set_num_threads(threads)
        if own_group and dist.is_initialized():
            dist.destroy_process_group()
    return payload


if __name__ == "__main__":
    main()
