"""bench/gpu_grpo.py on CPU: the length clock of its checkpoint stops responses where the prompts ask, a run without
CUDA writes nothing, and ``--smoke`` runs both sides end to end on a tiny shape (TRL's side is recorded as skipped
where ``trl`` is not installed)."""

import argparse
import importlib.util
import json
import random

import pytest
import torch

from bench import gpu_grpo

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


def _args(**overrides):
    values = dict(steps=2, prompts=4, response_length=48, min_length=8, seed=0)
    values.update(overrides)
    return argparse.Namespace(**values)


def test_the_length_score_is_one_at_the_asked_length_and_falls_off_both_ways():
    assert gpu_grpo.compute_score("bench/gpu_grpo", "x" * 9, "10") == 1.0  # 9 characters + EOS = 10 tokens
    assert gpu_grpo.length_score(4, 10) == pytest.approx(0.5)
    assert gpu_grpo.length_score(19, 10) == pytest.approx(0.5)


def test_every_step_asks_for_the_same_long_tailed_lengths():
    tokenizer = gpu_grpo.build_vocab_tokenizer(gpu_grpo.SMOKE["vocab_size"])
    rows = gpu_grpo.step_rows(_args(steps=3, prompts=6, response_length=1024, min_length=16), tokenizer)
    per_step = [sorted(r["extra_info"]["asked"] for r in rows if r["extra_info"]["step"] == s) for s in (1, 2, 3)]
    assert per_step[0] == per_step[1] == per_step[2]
    asked = per_step[0]
    assert asked[0] < 40 and 1000 < asked[-1] <= 1024 and asked[len(asked) // 2] < 300  # most short, one long


def test_the_checkpoint_emits_eos_where_the_prompt_asks():
    tokenizer = gpu_grpo.build_vocab_tokenizer(gpu_grpo.SMOKE["vocab_size"])
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(gpu_grpo.model_config(gpu_grpo.SMOKE, tokenizer)).eval()
    per_tick = gpu_grpo.wire_clock(model, tokenizer.convert_tokens_to_ids(gpu_grpo.TICK))
    rows = gpu_grpo.step_rows(_args(steps=1, prompts=4, response_length=96, min_length=8), tokenizer)
    rng = random.Random(0)
    sequences = []
    for row in rows:
        ids = gpu_grpo.prompt_tokens(tokenizer, row["prompt"][0]["content"])
        sequences.append((ids + [rng.randrange(30, len(tokenizer)) for _ in range(96)], len(ids)))
    gpu_grpo.calibrate_eos(model, sequences, tokenizer.eos_token_id, per_tick)
    readings = gpu_grpo._clock_readings(model, sequences, tokenizer.eos_token_id)
    for row, reading in zip(rows, readings):
        mean, median = gpu_grpo.expected_length(reading["p_eos"])
        asked = row["extra_info"]["asked"]
        assert abs(mean - asked) <= 2 and abs(median - asked) <= 2, (asked, mean, median)


def test_the_trl_side_is_recorded_as_skipped_without_trl(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "trl" else real(name, *rest))
    side = gpu_grpo.run_trl_side(_args(), {}, tmp_path, "cpu", 10.0)
    assert side == {"skipped": "trl is not importable", "steps": []}
    assert gpu_grpo.summarize(side, 16, 1) is None


@needs_no_cuda
def test_without_cuda_a_full_run_writes_nothing(tmp_path, capsys):
    assert gpu_grpo.main(["--out-dir", str(tmp_path)]) is None
    assert "needs a CUDA device" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_gpu_grpo_smoke_runs_both_sides_and_reports_the_stages(tmp_path):
    payload = gpu_grpo.main(["--smoke", "--out-dir", str(tmp_path)])
    ours = payload["summary"]["ours"]
    assert payload["raw"]["ours"]["error"] is None, payload["raw"]["ours"]["error"]
    assert ours["steps_timed"] == 1 and ours["samples_per_s"] > 0
    assert ours["generate_s"] > 0 and ours["update_s"] > 0
    steps = payload["raw"]["ours"]["steps"]
    assert all(len(step["lengths"]) == 16 for step in steps)  # 4 prompts x 4 samples, read back from the dumps
    assert all(1 <= n <= 48 for step in steps for n in step["lengths"])
    trl = payload["raw"]["trl"]
    if importlib.util.find_spec("trl") is None:
        assert trl["skipped"] and payload["summary"]["trl"] is None and payload["ratio_ours_vs_trl"] is None
    else:
        assert trl["error"] is None, trl["error"]
        assert payload["summary"]["trl"]["generate_s"] > 0 and payload["ratio_ours_vs_trl"] > 0
        assert all(len(step["lengths"]) == 16 for step in trl["steps"])
    written = json.loads((tmp_path / "gpu_grpo.json").read_text())
    assert written["checkpoint"]["asked_per_step"] == payload["checkpoint"]["asked_per_step"]
    assert "samples/s" in (tmp_path / "gpu_grpo.md").read_text()
