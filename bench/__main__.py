"""``python -m bench``: run the CPU benchmark set, one script per subprocess, inside a total time budget.

Each script writes its own ``bench/results/NAME.{json,md}``. A script that fails, or would start after the budget
is spent, is reported as such and the others still run; the exit status is 1 if any script failed.
Scripts that another part of the project has not written yet are listed as missing, not treated as failures.

    python -m bench                       # the whole CPU set (about 15 minutes on 2 busy cores)
    python -m bench --only framework_overhead dataproto_dispatch
    python -m bench --list
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

# name -> (extra arguments for the CPU set, per-script time cap in seconds). Arguments keep each script near its
# ~3-minute share; run a script directly for its full defaults.
CPU_SET: dict[str, tuple[list[str], int]] = {
    "framework_overhead": ([], 300),
    "trl_comparison": ([], 600),
    "dataproto_dispatch": ([], 240),
    "dataproto_serialization": (["--repeats", "5"], 180),
    "rollout_throughput": (["--repeats", "1"], 300),
    "sampling_cost": ([], 150),
    "kv_cache_growth": ([], 150),
    "kv_compaction": ([], 120),
    "response_logits": (["--repeats", "3"], 240),
    "compiled_kernels": (["--vocab", "32000", "--repeats", "3"], 150),
    "fused_kernels": (["--rows", "4", "--repeats", "2"], 150),
    "weight_sync": ([], 240),
    "agent_loop_overhead": ([], 240),
    "async_speedup": ([], 300),
    "sandbox_startup": ([], 120),
}
GPU_ONLY = ("gpu_suite", "gpu_engine_overhead", "gpu_update", "gpu_grpo")
# Longer than a share of the budget (about 25 minutes for 3 seeds): run with --only, or the script itself.
LONG_RUNS = ("long_tail",)


def run_one(name: str, extra: list[str], timeout_s: float) -> dict:
    script = BENCH_DIR / f"{name}.py"
    if not script.exists():
        return {"name": name, "status": "missing", "seconds": 0.0}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), *extra],
            cwd=REPO_ROOT,
            env=env,
            timeout=timeout_s,
            capture_output=True,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return {"name": name, "status": f"timed out after {timeout_s:.0f}s", "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-1500:]
        return {"name": name, "status": f"failed (rc={proc.returncode})", "seconds": seconds, "log": tail}
    status = "skipped" if proc.stdout.lstrip().startswith("skipped") else "ok"
    return {"name": name, "status": status, "seconds": seconds, "output": proc.stdout}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these scripts (the GPU-only and long ones allowed)"
    )
    parser.add_argument("--skip", nargs="+", metavar="NAME", default=[], help="leave these scripts out")
    parser.add_argument("--budget-s", type=float, default=15 * 60, help="total time budget in seconds")
    parser.add_argument("--list", action="store_true", help="print the CPU set and exit")
    parser.add_argument("--quiet", action="store_true", help="do not echo each script's table")
    args = parser.parse_args(argv)
    known = set(CPU_SET) | set(GPU_ONLY) | set(LONG_RUNS)
    unknown = sorted((set(args.only or []) | set(args.skip)) - known)
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {sorted(known)}")
    if args.list:
        for name, (extra, cap) in CPU_SET.items():
            present = "" if (BENCH_DIR / f"{name}.py").exists() else "  (not written yet)"
            print(f"{name:26s} cap {cap:4d}s  {' '.join(extra)}{present}")
        print(f"GPU only (run with --only): {', '.join(GPU_ONLY)}")
        print(f"long runs (run with --only): {', '.join(LONG_RUNS)}")
        return 0
    names = args.only or list(CPU_SET)
    names = [n for n in names if n not in args.skip]
    deadline = time.monotonic() + args.budget_s
    results = []
    for name in names:
        extra, cap = CPU_SET.get(name, ([], 600))
        left = deadline - time.monotonic()
        if left < 30:
            results.append({"name": name, "status": "not run (budget spent)", "seconds": 0.0})
            continue
        print(f"== {name} (cap {min(cap, left):.0f}s)", flush=True)
        result = run_one(name, extra, min(cap, left))
        results.append(result)
        if result.get("output") and not args.quiet:
            print(result["output"].rstrip(), flush=True)
        if result.get("log"):
            print(result["log"], file=sys.stderr, flush=True)
        print(f"-- {name}: {result['status']} in {result['seconds']:.0f}s", flush=True)
    print("\n| benchmark | status | seconds |\n|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['status']} | {r['seconds']:.0f} |")
    failed = [r for r in results if r["status"].startswith(("failed", "timed out"))]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
