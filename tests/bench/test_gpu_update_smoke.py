"""bench/gpu_update.py on CPU: ``--smoke`` runs every update variant's code path on tiny shapes (in this process: the
script tears down the process group it opened), the trace summary reads a GPU trace, and without CUDA a full run
writes nothing."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from bench import gpu_update
from verl.utils.varlen_attention import PACKED_ATTENTION_ENV

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


def test_smoke_runs_every_variant_and_writes_its_tables(tmp_path):
    mode = os.environ.get(PACKED_ATTENTION_ENV)
    payload = gpu_update.main(["--smoke", "--out-dir", str(tmp_path)])
    records = payload["variants"]
    assert [r["variant"] for r in records] == [
        gpu_update.dataclasses.asdict(v) for v in gpu_update.plan(payload_args(payload), 0.0)
    ]
    ran = [r for r in records if r["status"] == "ok"]
    assert [r["status"] for r in records if r not in ran] == ["skipped: Liger needs liger-kernel and a CUDA device"] * 2
    kinds = {
        (r["variant"]["packed"], r["variant"]["attention"], bool(r["variant"]["max_tokens"]), r["variant"]["fused"])
        for r in ran
    }
    assert {(False, "mask", False, False), (True, "mask", False, False), (True, "varlen", False, False)} <= kinds
    assert {(True, "varlen", True, False), (True, "varlen", True, True)} <= kinds
    for record in ran:
        assert len(record["update_s"]) == 1 and record["update_s"][0] > 0
        stages = record["stages"]
        micro_batches = record["layout"]["micro_batches"]
        assert stages["forward"]["calls"] == stages["backward"]["calls"] == micro_batches
        assert stages["optimizer"]["calls"] == 1 and stages["forward"]["gpu_ms"] is None  # CPU: no CUDA events
        assert all(stages[name]["host_ms"] > 0 for name in ("forward", "backward", "optimizer", "step"))
        assert record["layout"]["micro_batches"] >= 1
    padded_tail = next(r for r in ran if r["variant"]["data"] == "long_tail" and not r["variant"]["packed"])
    assert padded_tail["layout"]["computed_tokens"] > payload["data"]["0.5B"]["long_tail"]["real_tokens"]
    profiled = [r for r in ran if "profile" in r]
    assert len(profiled) == 2 and all(r["profile"]["top_kernels"] for r in profiled)
    assert all("log_prob_s" in r for r in ran if r["variant"]["log_prob"])
    table = (tmp_path / "gpu_update.md").read_text()
    assert table.startswith("cpu (smoke)") and "packed, varlen" in table and "Top kernels" in table
    assert (tmp_path / "gpu_update.json").exists()
    # the script leaves the process as it found it
    assert not dist.is_initialized()
    assert os.environ.get(PACKED_ATTENTION_ENV) == mode


def payload_args(payload):
    import argparse

    return argparse.Namespace(**payload["config"])


def test_trace_summary_separates_kernel_time_from_wall_time():
    events = [
        {"ph": "X", "cat": "kernel", "name": "void gemm_bf16(int)", "ts": 0.0, "dur": 10.0},
        {"ph": "X", "cat": "kernel", "name": "void gemm_bf16(int)", "ts": 5.0, "dur": 10.0},  # overlaps (two streams)
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 40.0, "dur": 5.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.0, "dur": 1.0},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "ts": 1.0, "dur": 1.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 2.0, "dur": 30.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 99.0},
    ]
    summary = gpu_update.summarize_trace(events, wall_s=100e-6, cuda=True)
    assert summary["kernel_ms"] == pytest.approx(0.025)
    assert summary["gpu_busy_ms"] == pytest.approx(0.020)  # the union: 0-15 and 40-45 µs
    assert summary["gpu_busy_pct"] == pytest.approx(20.0)
    assert (summary["kernels"], summary["launches"], summary["syncs"]) == (3, 2, 1)
    top = summary["top_kernels"][0]
    assert (top["name"], top["count"]) == ("gemm_bf16", 2) and top["pct"] == pytest.approx(80.0)


def test_the_long_tail_batch_pads_prompts_left_and_responses_right():
    data = gpu_update.long_tail_batch(64, 256, 768, vocab=1000, seed=0)
    mask = data.batch["attention_mask"]
    prompt, response = mask[:, :256], mask[:, 256:]
    assert bool((prompt[:, -1] == 1).all()) and bool((response[:, 0] == 1).all())
    assert bool((prompt.diff(dim=-1) >= 0).all()) and bool((response.diff(dim=-1) <= 0).all())  # one run each
    stats = gpu_update.batch_stats(data)
    assert 0.3 < stats["real_tokens"] / stats["slots"] < 0.6
    assert stats["response_length_max"] == 768 and stats["response_length_median"] < 300
    assert bool((data.batch["position_ids"][:, 256] == prompt.sum(-1)).all())


@needs_no_cuda
def test_without_cuda_a_full_run_writes_nothing(tmp_path, capsys):
    assert gpu_update.main(["--out-dir", str(tmp_path)]) is None
    assert "needs a CUDA device" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_releasing_a_liger_model_undoes_its_patches_of_the_qwen2_module():
    """Liger patches transformers' Qwen2 module for the whole process; the rows after a Liger row must not run it."""
    import argparse

    from transformers.models.qwen2 import modeling_qwen2

    session = gpu_update.Session(argparse.Namespace(seed=0), torch.device("cpu"))
    original = modeling_qwen2.apply_rotary_pos_emb
    session.patched = (modeling_qwen2, dict(vars(modeling_qwen2)))
    modeling_qwen2.apply_rotary_pos_emb = lambda *args: args
    modeling_qwen2.liger_added_name = 1
    session.release()
    assert modeling_qwen2.apply_rotary_pos_emb is original
    assert not hasattr(modeling_qwen2, "liger_added_name") and session.patched is None
