"""Write a synthetic task to train/test parquet in verl's row format (no download needed).

Example:
    python examples/data_preprocess/synthetic.py --task target_digit --local_dir ~/data/target_digit \
        --train_size 1024 --test_size 128 --seed 0
"""

from __future__ import annotations

import argparse
import os

from verl.utils.synthetic_tasks import TASKS, write_task_files


def main(argv: list[str] | None = None) -> None:
    tasks = "\n".join(f"  {name}: {spec.description}" for name, spec in sorted(TASKS.items()))
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=f"tasks:\n{tasks}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", required=True, choices=sorted(TASKS), help="which synthetic task to write")
    parser.add_argument("--local_dir", required=True, help="output folder for train.parquet and test.parquet")
    parser.add_argument("--train_size", type=int, default=1024)
    parser.add_argument("--test_size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        paths = write_task_files(
            args.task, os.path.expanduser(args.local_dir), args.train_size, args.test_size, args.seed
        )
    except ValueError as err:
        parser.error(str(err))
    for split, path in paths.items():
        print(f"{split}: {path}")


if __name__ == "__main__":
    main()
