"""Turn a run's `metrics.jsonl` into a PNG of reward and loss curves: `python -m verl.utils.plot RUN_DIR`."""

from __future__ import annotations

import argparse
from pathlib import Path

from verl.utils.tracking import read_metrics

DEFAULT_PANELS = (
    ("reward", ("critic/score/mean", "critic/rewards/mean", "val-core/reward/mean")),
    ("loss", ("actor/pg_loss", "critic/vf_loss", "actor/entropy")),
    ("length", ("response_length/mean",)),
)


def plot_run(run_dir: str | Path, out_path: str | Path | None = None) -> Path:
    """Draw every known metric found in the log, one panel per group; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    panels = []
    for title, keys in DEFAULT_PANELS:
        present = [key for key in keys if any(key in record for record in records)]
        if present:
            panels.append((title, present))
    if not panels:
        raise ValueError(f"{Path(run_dir) / 'metrics.jsonl'} has none of the plotted metrics {DEFAULT_PANELS}")
    figure, axes = plt.subplots(len(panels), 1, figsize=(7, 2.6 * len(panels)), squeeze=False)
    for axis, (title, keys) in zip(axes[:, 0], panels):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            axis.plot([p[0] for p in points], [p[1] for p in points], label=key)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    out = Path(out_path) if out_path is not None else Path(run_dir) / "curves.png"
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", help="folder that holds metrics.jsonl")
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")
    args = parser.parse_args(argv)
    print(plot_run(args.run_dir, args.out))


if __name__ == "__main__":
    main()
