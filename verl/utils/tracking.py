"""Experiment tracking: one `Tracking.log(metrics, step)` call fans out to every configured backend.

Backends are chosen by `trainer.logger` (one name or a list): ``console``, ``file`` (``metrics.jsonl`` in the run
folder, one JSON object per step, and ``val_generations.jsonl`` for `Tracking.log_generations`), ``tensorboard``
(where verl writes: ``$TENSORBOARD_DIR``, else ``tensorboard_log/<project_name>/<experiment_name>`` under the working
directory), ``wandb`` and ``mlflow``. The last two are optional packages, imported only when asked for, with an error
that names the extra to install.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from verl.utils.rl_insight import RLInsightLogger

__all__ = [
    "SUPPORTED_BACKENDS",
    "RLInsightLogger",
    "Tracking",
    "ValidationGenerationsLogger",
    "flatten_metrics",
    "read_metrics",
    "tensorboard_dir",
]

SUPPORTED_BACKENDS = ("console", "file", "tensorboard", "wandb", "mlflow")
METRICS_FILE_NAME = "metrics.jsonl"
GENERATIONS_FILE_NAME = "val_generations.jsonl"


class _Backend(Protocol):
    def log(self, data: dict[str, float], step: int) -> None: ...

    def log_generations(self, samples: list[dict[str, Any]], step: int) -> None: ...

    def finish(self) -> None: ...


def _scalar(value: Any) -> float | None:
    """Turn tensors, numpy scalars and numbers into a float; anything else is not a metric."""
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Number):
        return float(value)
    return None


def flatten_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """Keep scalar metrics only; nested dicts become `a/b` keys."""
    flat: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            for sub_key, sub_value in flatten_metrics(value).items():
                flat[f"{key}/{sub_key}"] = sub_value
            continue
        scalar = _scalar(value)
        if scalar is not None:
            flat[key] = scalar
    return flat


class ConsoleBackend:
    """Prints one line per step; long runs stay readable because keys are sorted."""

    def log(self, data: dict[str, float], step: int) -> None:
        parts = [f"{key}:{value:.4g}" for key, value in sorted(data.items())]
        print(f"step:{step} - " + " - ".join(parts), flush=True)

    def log_generations(self, samples: list[dict[str, Any]], step: int) -> None:
        lines = [f"step:{step} - validation generations:"]
        lines += [f"  [score {s['score']:.4g}] {s['input']!r} -> {s['output']!r}" for s in samples]
        print("\n".join(lines), flush=True)

    def finish(self) -> None:
        pass


class FileBackend:
    """Appends one JSON object per step to `metrics.jsonl`, so a resumed run extends the same log."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / METRICS_FILE_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, data: dict[str, float], step: int) -> None:
        record = {"step": step}
        record.update({key: (None if math.isnan(value) else value) for key, value in data.items()})
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    def log_generations(self, samples: list[dict[str, Any]], step: int) -> None:
        with open(self.path.parent / GENERATIONS_FILE_NAME, "a", encoding="utf-8") as handle:
            for sample in samples:
                handle.write(json.dumps({"step": step, **sample}, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        pass


def tensorboard_dir(project_name: str, experiment_name: str) -> Path:
    """Where TensorBoard events go, as in verl: ``$TENSORBOARD_DIR``, else
    ``tensorboard_log/<project_name>/<experiment_name>`` (relative to the working directory)."""
    return Path(os.environ.get("TENSORBOARD_DIR") or Path("tensorboard_log") / project_name / experiment_name)


class TensorboardBackend:
    """Scalars and generation tables in :func:`tensorboard_dir`."""

    def __init__(self, project_name: str, experiment_name: str):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = tensorboard_dir(project_name, experiment_name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        print(f"tensorboard: writing to {self.log_dir}", flush=True)
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, data: dict[str, float], step: int) -> None:
        for key, value in data.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def log_generations(self, samples: list[dict[str, Any]], step: int) -> None:
        self.writer.add_text("val/generations", _markdown_table(samples), global_step=step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


def _markdown_table(samples: list[dict[str, Any]]) -> str:
    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = [f"| {cell(s['input'])} | {cell(s['output'])} | {s['score']:.4g} |" for s in samples]
    return "\n".join(["| input | output | score |", "|---|---|---|", *rows])


def _optional_import(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError as error:
        raise ImportError(
            f"trainer.logger asks for '{module}', which is not installed: pip install 'verl[{extra}]'"
        ) from error


class WandbBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        self.wandb = _optional_import("wandb", "wandb")
        self.wandb.init(project=project_name, name=experiment_name, config=config)

    @classmethod
    def active(cls) -> WandbBackend:
        """A backend writing to the run this process already started (no ``wandb.init``)."""
        backend = cls.__new__(cls)
        backend.wandb = _optional_import("wandb", "wandb")
        return backend

    def log(self, data: dict[str, float], step: int) -> None:
        self.wandb.log(data, step=step)

    def log_generations(self, samples: list[dict[str, Any]], step: int) -> None:
        columns = ["input", "output", "score"]
        table = self.wandb.Table(columns=columns, data=[[s[c] for c in columns] for s in samples])
        self.wandb.log({"val/generations": table}, step=step)

    def finish(self) -> None:
        self.wandb.finish()


class MlflowBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        self.mlflow = _optional_import("mlflow", "mlflow")
        self.mlflow.set_experiment(project_name)
        self.mlflow.start_run(run_name=experiment_name)
        if config:
            self.mlflow.log_params({key: str(value)[:250] for key, value in config.items()})

    @classmethod
    def active(cls) -> MlflowBackend:
        """A backend writing to the run this process already started (no ``start_run``)."""
        backend = cls.__new__(cls)
        backend.mlflow = _optional_import("mlflow", "mlflow")
        return backend

    def log(self, data: dict[str, float], step: int) -> None:
        # mlflow metric names may not contain '@'; keep them otherwise identical.
        self.mlflow.log_metrics({key.replace("@", "_at_"): value for key, value in data.items()}, step=step)

    def log_generations(self, samples: list[dict[str, Any]], step: int) -> None:
        self.mlflow.log_text(json.dumps(samples, ensure_ascii=False, indent=1), f"val_generations/step_{step}.json")

    def finish(self) -> None:
        self.mlflow.end_run()


class Tracking:
    """Fan-out logger keyed by `trainer.logger`; unknown backend names fail at construction."""

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | Sequence[str] = "console",
        config: dict | None = None,
        local_dir: str | os.PathLike | None = None,
    ):
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        unknown = [name for name in backends if name not in SUPPORTED_BACKENDS]
        if unknown:
            raise ValueError(f"trainer.logger has unknown backend(s) {unknown}; supported: {list(SUPPORTED_BACKENDS)}")
        self.run_dir = Path(local_dir) if local_dir is not None else Path("outputs") / project_name / experiment_name
        self.backends: dict[str, _Backend] = {}
        for name in backends:
            if name == "console":
                self.backends[name] = ConsoleBackend()
            elif name == "file":
                self.backends[name] = FileBackend(self.run_dir)
            elif name == "tensorboard":
                self.backends[name] = TensorboardBackend(project_name, experiment_name)
            elif name == "wandb":
                self.backends[name] = WandbBackend(project_name, experiment_name, config)
            elif name == "mlflow":
                self.backends[name] = MlflowBackend(project_name, experiment_name, config)

    def log(self, data: Mapping[str, Any], step: int) -> None:
        flat = flatten_metrics(data)
        for backend in self.backends.values():
            backend.log(flat, step)

    def log_generations(self, samples: Sequence[Mapping[str, Any]], step: int) -> None:
        """Log validation samples (``input``, ``output``, ``score``) to every backend: a console listing, lines of
        ``val_generations.jsonl``, a TensorBoard text table, a wandb table or an mlflow artifact."""
        rows = [{"input": str(s["input"]), "output": str(s["output"]), "score": float(s["score"])} for s in samples]
        if rows:
            for backend in self.backends.values():
                backend.log_generations(rows, step)

    def finish(self) -> None:
        for backend in self.backends.values():
            backend.finish()


def _generation_row(sample: Any) -> dict[str, Any]:
    """One validation sample as ``{input, output, score}``: a mapping with those keys, or verl's
    ``(input, output, score)`` tuple."""
    if isinstance(sample, Mapping):
        values = [sample.get(key) for key in ("input", "output", "score")]
    elif isinstance(sample, Sequence) and not isinstance(sample, str) and len(sample) == 3:
        values = list(sample)
    else:
        raise ValueError(
            f"a validation sample must be (input, output, score) or a mapping with those keys, got {sample!r}"
        )
    return {"input": str(values[0]), "output": str(values[1]), "score": float(values[2])}


@dataclass
class ValidationGenerationsLogger:
    """verl's logger of validation samples, separate from :class:`Tracking`: ``log(loggers, samples, step)`` writes
    the samples to each backend named in ``loggers`` (``trainer.logger``).

    ``console`` prints them, ``file`` appends to ``val_generations.jsonl`` in ``local_dir`` (default
    ``outputs/<project>/<experiment>``, where :class:`Tracking` writes), ``tensorboard`` adds a text table, and
    ``wandb`` / ``mlflow`` log to the run this process already started (the trainer's :class:`Tracking` starts it);
    wandb is skipped when no run is active, as in verl.
    """

    project_name: str | None = None
    experiment_name: str | None = None
    local_dir: str | os.PathLike | None = None
    _sinks: dict[str, _Backend] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _sink(self, name: str) -> _Backend | None:
        if name in self._sinks:
            return self._sinks[name]
        project, experiment = self.project_name or "verl", self.experiment_name or "default"
        if name == "console":
            sink: _Backend | None = ConsoleBackend()
        elif name == "file":
            sink = FileBackend(self.local_dir if self.local_dir is not None else Path("outputs") / project / experiment)
        elif name == "tensorboard":
            sink = TensorboardBackend(project, experiment)
        elif name == "wandb":
            sink = WandbBackend.active()
            if sink.wandb.run is None:
                return None  # no run to attach a table to (checked again at the next call)
        else:  # mlflow
            sink = MlflowBackend.active()
        self._sinks[name] = sink
        return sink

    def log(self, loggers: str | Sequence[str], samples: Sequence[Any], step: int) -> None:
        """Write ``samples`` (``(input, output, score)`` tuples or mappings) for ``step`` to every backend named."""
        names = [loggers] if isinstance(loggers, str) else list(loggers)
        unknown = [name for name in names if name not in SUPPORTED_BACKENDS]
        if unknown:
            raise ValueError(f"trainer.logger has unknown backend(s) {unknown}; supported: {list(SUPPORTED_BACKENDS)}")
        rows = [_generation_row(sample) for sample in samples]
        if not rows:
            return
        for name in names:
            sink = self._sink(name)
            if sink is not None:
                sink.log_generations(rows, step)


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Read `metrics.jsonl`; when a resumed run re-logged a step, the last record of that step wins."""
    path = Path(run_dir) / METRICS_FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no {METRICS_FILE_NAME} in run folder {run_dir}")
    by_step: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number} is not valid JSON: {error}") from error
            by_step[int(record["step"])] = record
    return [by_step[step] for step in sorted(by_step)]
