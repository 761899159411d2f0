"""Write GSM8K as verl parquet files (train.parquet, test.parquet).

Reads a local copy (`--local_dataset_path`, a folder that `datasets.load_dataset` understands, e.g. a
saved `openai/gsm8k` snapshot) or, on a machine with hub access, downloads `openai/gsm8k`.
"""

from __future__ import annotations

import argparse
import os
import re

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
DATA_SOURCE = "openai/gsm8k"


def extract_solution(answer: str) -> str:
    """The number after '####' in a GSM8K reference answer, without thousands separators."""
    match = re.search(r"#### (-?[0-9.,]+)", answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return match.group(1).replace(",", "")


def make_row(example: dict, index: int, split: str) -> dict:
    question = example["question"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(example["answer"])},
        "extra_info": {"split": split, "index": index, "question": question, "answer": example["answer"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--local_dataset_path", default=None, help="local copy of openai/gsm8k")
    parser.add_argument("--local_dir", default="~/data/gsm8k", help="where to write the parquet files")
    args = parser.parse_args()

    import datasets

    source = args.local_dataset_path or DATA_SOURCE
    dataset = datasets.load_dataset(source, "main")
    out_dir = os.path.expanduser(args.local_dir)
    os.makedirs(out_dir, exist_ok=True)
    for split in ("train", "test"):
        rows = dataset[split].map(
            lambda example, index, split=split: make_row(example, index, split),
            with_indices=True,
            remove_columns=dataset[split].column_names,
        )
        rows.to_parquet(os.path.join(out_dir, f"{split}.parquet"))
        print(f"wrote {len(rows)} rows to {os.path.join(out_dir, split + '.parquet')}")


if __name__ == "__main__":
    main()
