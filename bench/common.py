"""Shared plumbing of the benchmark scripts: machine facts, timing, and the JSON + markdown result files.

Every number a benchmark reports must be reproducible by someone else, so each result file records where and how
it was measured (CPU model and count, library versions, git commit, seed, load average) next to every raw timing,
not only the summary.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "REPO_ROOT",
    "RESULTS_DIR",
    "cpu_model",
    "git_commit",
    "library_versions",
    "machine_info",
    "markdown_table",
    "median",
    "ratio",
    "time_calls",
    "write_results",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"

_LIBRARIES = ("torch", "transformers", "ray", "numpy", "tensordict", "trl", "accelerate", "datasets")


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """``HEAD`` of the checkout, suffixed ``-dirty`` when tracked files differ from it; None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def library_versions(names: Sequence[str] = _LIBRARIES) -> dict[str, str | None]:
    """Installed version of each library (None when it is not importable here)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # an optional library may be absent or broken; record that, do not fail the benchmark
            versions[name] = None
            continue
        versions[name] = str(getattr(module, "__version__", "unknown"))
    return versions


def machine_info(libraries: Sequence[str] = _LIBRARIES) -> dict[str, Any]:
    """Where a result was measured: CPU, OS, Python, library versions, git commit, load and GPU if any."""
    info: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": library_versions(libraries),
        "git_commit": git_commit(),
    }
    try:
        info["load_average_1m_5m_15m"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        info["load_average_1m_5m_15m"] = None
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:
        pass
    return info


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (a benchmark with no samples is a bug, so it raises)."""
    if not values:
        raise ValueError("median of an empty list of timings")
    return float(statistics.median(values))


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None when the denominator is zero (a stage one side does not run)."""
    return None if denominator == 0 else numerator / denominator


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != 0 and abs(value) < 0.01:
            return f"{value:.2e}"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats get 3 significant digits, None prints as ``-``."""
    if not headers:
        raise ValueError("markdown_table needs at least one header")
    for i, row in enumerate(rows):
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row {i} has {len(row)} cells, headers have {len(headers)}")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    name: str, payload: dict[str, Any], markdown: str, seed: int | None, out_dir: Path | None = None
) -> tuple[Path, Path]:
    """Write ``NAME.json`` (payload + machine info + seed + UTC time) and ``NAME.md`` under ``out_dir``."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"result name must be a plain file stem, got {name!r}")
    out_dir = Path(out_dir) if out_dir is not None else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "machine": machine_info(),
        **payload,
    }
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    md_path.write_text(markdown.rstrip() + "\n")
    return json_path, md_path
