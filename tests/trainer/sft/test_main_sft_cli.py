"""`python -m verl.trainer.main_sft` with Hydra overrides, and the same run as two torchrun processes (gloo + FSDP2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _overrides(model_dir, files, out_dir, *extra):
    return [
        f"data.train_files={files['train']}",
        f"data.val_files={files['test']}",
        "data.max_length=32",
        "data.train_batch_size=16",
        "data.micro_batch_size_per_gpu=4",
        f"model.path={model_dir}",
        "optim.lr=1e-3",
        "trainer.total_training_steps=5",
        f"trainer.default_local_dir={out_dir}",
        "trainer.logger=[console,file]",
        "hydra.run.dir=.",
        *extra,
    ]


def _run(args, cwd, timeout=300):
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _losses(out_dir):
    records = [json.loads(line) for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r["train/loss"] for r in records], records[-1]["val/loss"]


@pytest.fixture(scope="module")
def single_process_run(tiny_model_dir, arith_seq_files, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("sft_cli")
    out = cwd / "ckpt"
    proc = _run([sys.executable, "-m", "verl.trainer.main_sft", *_overrides(tiny_model_dir, arith_seq_files, out)], cwd)
    return proc, out


def test_cli_trains_and_writes_the_checkpoint(single_process_run, tiny_model_dir):
    proc, out = single_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step:5 " in proc.stdout and "train/loss" in proc.stdout and "val/loss" in proc.stdout
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (out / "huggingface" / name).is_file(), name
    losses, _ = _losses(out)
    assert len(losses) == 5 and losses[-1] < losses[0]

    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(out / "huggingface")
    exported = AutoTokenizer.from_pretrained(out / "huggingface")
    source = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = 'What is 2 + 3? {"a": [1, 2]}'
    ids = exported(text)["input_ids"]
    assert ids == source(text)["input_ids"] and exported.decode(ids) == text
    assert exported.chat_template == source.chat_template


def test_cli_reports_bad_input_in_one_line(tiny_model_dir, arith_seq_files, tmp_path, monkeypatch, capsys):
    """Data and config mistakes end with exit code 2 and one line naming the key, not a traceback."""
    from verl.trainer import main_sft

    monkeypatch.chdir(tmp_path)
    overrides = _overrides(tiny_model_dir, arith_seq_files, tmp_path / "o", "data.response_key=answer")
    monkeypatch.setattr(sys, "argv", ["main_sft", *overrides])
    with pytest.raises(SystemExit) as info:
        main_sft.main()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error: data.response_key='answer': parquet file" in err and "no column 'answer'" in err

    monkeypatch.setattr(sys, "argv", ["main_sft", *overrides[:-1], "data.truncation=middle"])
    with pytest.raises(SystemExit) as info:
        main_sft.main()
    assert info.value.code == 2
    assert "config error: data.truncation: must be one of ['error', 'left', 'right']" in capsys.readouterr().err


@pytest.mark.slow
def test_two_torchrun_processes_match_one(single_process_run, tiny_model_dir, arith_seq_files, tmp_path):
    """Two gloo ranks with FSDP2 each see half the batch; the logged steps equal the single-process run."""
    proc, single_out = single_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "ckpt"
    args = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "verl.trainer.main_sft",
        *_overrides(tiny_model_dir, arith_seq_files, out),
    ]
    proc = _run(args, tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 proc x 2 micro x 4" in proc.stdout
    (losses, val), (want, want_val) = _losses(out), _losses(single_out)
    assert losses == pytest.approx(want, rel=1e-4) and val == pytest.approx(want_val, rel=1e-4)

    from safetensors.torch import load_file

    got = load_file(out / "huggingface" / "model.safetensors")
    ref = load_file(single_out / "huggingface" / "model.safetensors")
    assert got.keys() == ref.keys()
    assert max(float((got[k] - ref[k]).abs().max()) for k in got) < 1e-4
