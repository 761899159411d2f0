"""verl's ValidationGenerationsLogger and RLInsightLogger under verl.utils.tracking."""

from __future__ import annotations

import contextlib
import importlib.machinery
import json
import sys
import types

import pytest

from verl.utils.extras import MissingExtraError
from verl.utils.tracking import RLInsightLogger, ValidationGenerationsLogger


def test_validation_generations_go_to_console_and_file(tmp_path, capsys):
    logger = ValidationGenerationsLogger("proj", "exp", local_dir=tmp_path)
    logger.log(["console", "file"], [("2+2=", "4", 1.0), {"input": "3+3=", "output": "7", "score": 0}], step=5)
    logger.log("file", [], step=6)  # nothing to write
    lines = (tmp_path / "val_generations.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 5, "input": "2+2=", "output": "4", "score": 1.0},
        {"step": 5, "input": "3+3=", "output": "7", "score": 0.0},
    ]
    assert "step:5 - validation generations" in capsys.readouterr().out


def test_validation_generations_refuse_unknown_loggers_and_bad_samples(tmp_path):
    logger = ValidationGenerationsLogger(local_dir=tmp_path)
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['swanlab'\]"):
        logger.log(["file", "swanlab"], [("a", "b", 1.0)], step=1)
    with pytest.raises(ValueError, match="must be \\(input, output, score\\)"):
        logger.log("file", [("only two", "fields")], step=1)


def test_validation_generations_need_an_active_wandb_run(monkeypatch):
    logged = []
    fake = types.SimpleNamespace(
        run=None, Table=lambda columns, data: (columns, data), log=lambda data, step: logged.append((data, step))
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    logger = ValidationGenerationsLogger("p", "e")
    logger.log("wandb", [("q", "a", 0.5)], step=1)
    assert logged == []  # no run started: skipped, as in verl
    fake.run = object()
    logger.log("wandb", [("q", "a", 0.5)], step=2)
    assert logged == [({"val/generations": (["input", "output", "score"], [["q", "a", 0.5]])}, 2)]


@pytest.fixture
def fake_rl_insight(monkeypatch):
    calls = []
    module = types.ModuleType("rl_insight")
    module.__spec__ = importlib.machinery.ModuleSpec("rl_insight", None)
    module.init = lambda **kwargs: calls.append(("init", kwargs))
    module.metric_gauge = lambda name, value: calls.append(("gauge", name, value))
    module.finish = lambda: calls.append(("finish",))

    @contextlib.contextmanager
    def trace_state(name, state_lane_id=None, **labels):
        calls.append(("enter", name, state_lane_id, labels))
        yield
        calls.append(("exit", name))

    module.trace_state = trace_state
    monkeypatch.setitem(sys.modules, "rl_insight", module)
    monkeypatch.setattr(RLInsightLogger, "_module", None)
    monkeypatch.setattr(RLInsightLogger, "_init_done", False)
    return calls


def test_rl_insight_is_silent_while_disabled(monkeypatch):
    monkeypatch.delenv(RLInsightLogger.ENABLE_ENV, raising=False)
    monkeypatch.setattr(RLInsightLogger, "_module", None)
    with RLInsightLogger.trace_state("rollout"):
        RLInsightLogger.log({"a": 1.0}, step=1)
    RLInsightLogger.trace_span("x", start_time_ns=0, end_time_ns=1)
    assert RLInsightLogger._module is None  # never imported the client


def test_rl_insight_construction_needs_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "rl_insight", None)
    with pytest.raises(MissingExtraError, match="rl_insight"):
        RLInsightLogger("proj", "exp")


def test_rl_insight_reports_gauges_and_states_when_enabled(monkeypatch, fake_rl_insight):
    monkeypatch.setenv(RLInsightLogger.ENABLE_ENV, "1")
    RLInsightLogger("proj", "exp", config={"trainer": {"rl_insight": {"url": "http://svc"}}})
    RLInsightLogger.log({"actor/loss": 0.5, "note": "text"}, step=3)
    with RLInsightLogger.trace_state("update_actor", state_lane_id=0, step=3):
        pass
    RLInsightLogger.finish()
    assert fake_rl_insight == [
        ("init", {"project": "proj", "experiment_name": "exp", "config": {"url": "http://svc"}}),
        ("gauge", "actor_loss", 0.5),
        ("enter", "update_actor", 0, {"step": 3}),
        ("exit", "update_actor"),
        ("finish",),
    ]
