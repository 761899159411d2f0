import json

import numpy as np
import pytest
import torch

from verl.utils.plot import main as plot_main
from verl.utils.tracking import Tracking, flatten_metrics, read_metrics, tensorboard_dir


def test_file_backend_appends_one_json_object_per_step(tmp_path):
    tracker = Tracking("proj", "exp", default_backend=["file"], local_dir=tmp_path)
    tracker.log({"critic/score/mean": torch.tensor(0.5), "timing_s/gen": np.float32(1.25), "note": "text"}, step=1)
    tracker.log({"critic/score/mean": 0.75, "response_length/mean": 8}, step=2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "critic/score/mean": 0.5, "timing_s/gen": 1.25},
        {"step": 2, "critic/score/mean": 0.75, "response_length/mean": 8.0},
    ]


def test_resumed_run_extends_log_and_last_record_of_a_step_wins(tmp_path):
    Tracking("p", "e", ["file"], local_dir=tmp_path).log({"actor/pg_loss": 1.0}, step=3)
    Tracking("p", "e", ["file"], local_dir=tmp_path).log({"actor/pg_loss": 2.0}, step=3)
    Tracking("p", "e", ["file"], local_dir=tmp_path).log({"actor/pg_loss": 4.0}, step=4)
    assert [(r["step"], r["actor/pg_loss"]) for r in read_metrics(tmp_path)] == [(3, 2.0), (4, 4.0)]


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match=r"trainer.logger has unknown backend\(s\) \['stdout'\]"):
        Tracking("p", "e", ["console", "stdout"])


def test_console_backend_prints_sorted_metrics(capsys):
    Tracking("p", "e", "console").log({"b": 2.0, "a": 1.0}, step=7)
    assert capsys.readouterr().out.strip() == "step:7 - a:1 - b:2"


def test_tensorboard_writes_where_verl_does(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    tracker = Tracking("p", "e", ["tensorboard"], local_dir=tmp_path / "run")
    tracker.log({"critic/score/mean": 0.1}, step=1)
    tracker.finish()
    assert list((tmp_path / "tensorboard_log" / "p" / "e").glob("events.out.tfevents.*"))
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_tensorboard_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracker = Tracking("p", "e", "tensorboard", local_dir=tmp_path / "run")
    tracker.log({"x": 1.0}, step=0)
    tracker.finish()
    assert tensorboard_dir("p", "e") == tmp_path / "tb"
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


SAMPLES = [{"input": "1+2=", "output": "3", "score": 1.0}, {"input": "a|b", "output": "x\ny", "score": 0.0}]


def test_generations_go_to_the_file_and_the_console(tmp_path, capsys):
    tracker = Tracking("p", "e", ["file", "console"], local_dir=tmp_path)
    tracker.log_generations(SAMPLES, step=0)
    tracker.log_generations(SAMPLES[:1], step=4)
    tracker.log_generations([], step=5)  # nothing picked: nothing logged
    lines = [json.loads(line) for line in (tmp_path / "val_generations.jsonl").read_text().splitlines()]
    assert lines == [{"step": 0, **SAMPLES[0]}, {"step": 0, **SAMPLES[1]}, {"step": 4, **SAMPLES[0]}]
    out = capsys.readouterr().out
    assert "step:0 - validation generations:" in out and "[score 1] '1+2=' -> '3'" in out
    assert "step:5" not in out


def test_generations_become_a_tensorboard_text_table(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tensorboard"))
    tracker = Tracking("p", "e", ["tensorboard"], local_dir=tmp_path)
    tracker.log_generations(SAMPLES, step=2)
    tracker.finish()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    (event,) = events.Tensors("val/generations/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 2
    assert "| 1+2= | 3 | 1 |" in text and "| a\\|b | x y | 0 |" in text


def test_missing_optional_backend_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install 'verl\[wandb\]'"):
        Tracking("p", "e", ["wandb"])


def test_flatten_keeps_scalars_and_nests_dicts():
    flat = flatten_metrics({"a": {"b": 1, "c": "x"}, "d": torch.ones(3), "e": True})
    assert flat == {"a/b": 1.0, "e": 1.0}


def test_plot_writes_png_and_rejects_logs_without_curves(tmp_path):
    tracker = Tracking("p", "e", ["file"], local_dir=tmp_path)
    for step in range(1, 5):
        tracker.log({"critic/score/mean": step / 4, "actor/pg_loss": 1.0 / step}, step=step)
    plot_main([str(tmp_path)])
    png = tmp_path / "curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty"
    Tracking("p", "e", ["file"], local_dir=empty).log({"other": 1.0}, step=1)
    with pytest.raises(ValueError, match="has none of the plotted metrics"):
        plot_main([str(empty)])
