"""Print tool-use rate and reward per window of GRPO steps from a run's metrics.jsonl (markdown table).

    python examples/multi_turn/tool_metrics_table.py checkpoints/verl_examples/tiny_tool_agent_cpu --window 10

Agent-loop counters are read as ``agent_loop/<counter>/mean`` and, from older builds, as
``timing_s/agent_loop/<counter>/mean``. ``--check`` also asserts what the e2e test relies on (see its docstring).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from verl.utils.tracking import read_metrics

SCORE = "critic/score/mean"
COLUMNS = {"tool_calls": "tool calls / trajectory", "tool_calls_ok": "calls answered ok"}


def agent_loop_metric(record: dict[str, Any], counter: str) -> float | None:
    """``counter``'s per-step mean under either name the trainer has used for it."""
    for key in (f"agent_loop/{counter}/mean", f"timing_s/agent_loop/{counter}/mean"):
        if key in record:
            return float(record[key])
    return None


def windows(records: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Means of the reward and the tool counters over consecutive windows of ``size`` logged GRPO steps."""
    steps = [r for r in records if SCORE in r]
    out = []
    for start in range(0, len(steps), size):
        chunk = steps[start : start + size]
        row: dict[str, Any] = {"steps": f"{chunk[0]['step']}-{chunk[-1]['step']}", "reward": 0.0}
        row["reward"] = sum(float(r[SCORE]) for r in chunk) / len(chunk)
        for counter in COLUMNS:
            values = [agent_loop_metric(r, counter) for r in chunk]
            row[counter] = None if None in values else sum(values) / len(values)
        out.append(row)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    lines = ["| GRPO steps | " + " | ".join(COLUMNS.values()) + " | reward (`critic/score/mean`) |"]
    lines.append("|---" * (len(COLUMNS) + 2) + "|")
    for row in rows:
        lines.append(f"| {row['steps']} | " + " | ".join(fmt(row[c]) for c in COLUMNS) + f" | {row['reward']:.3f} |")
    return "\n".join(lines)


def check(rows: list[dict[str, Any]], expected_steps: int, records: list[dict[str, Any]], margin: float | None) -> None:
    """Every step logged with a finite reward and tools called; with ``margin``, tool use and reward in the last
    window are not lower than in the first by more than ``margin``."""
    steps = [r["step"] for r in records if SCORE in r]
    assert steps == list(range(1, expected_steps + 1)), f"logged GRPO steps {steps}, expected 1..{expected_steps}"
    assert all(math.isfinite(float(r[SCORE])) for r in records if SCORE in r), "a reward is not finite"
    assert all(row["tool_calls"] is not None for row in rows), f"no tool-call metric; keys: {sorted(records[-1])}"
    assert any(row["tool_calls"] > 0 for row in rows), "the model never called the tool"
    if margin is None:
        return
    first, last = rows[0], rows[-1]
    assert last["tool_calls"] >= first["tool_calls"] - margin, f"tool use fell: {first} -> {last}"
    assert last["reward"] >= first["reward"] - margin, f"reward fell: {first} -> {last}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the GRPO run's trainer.default_local_dir (holds metrics.jsonl)")
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--check", type=int, default=None, metavar="STEPS", help="assert the e2e expectations")
    parser.add_argument("--margin", type=float, default=None, help="with --check: allowed drop, first to last window")
    args = parser.parse_args(argv)
    records = read_metrics(args.run_dir)
    rows = windows(records, args.window)
    print(markdown(rows))
    if args.check is not None:
        check(rows, args.check, records, args.margin)
        print("check: ok")


if __name__ == "__main__":
    main()
