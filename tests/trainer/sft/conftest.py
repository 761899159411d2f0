"""Fixtures for the SFT trainer tests: tiny parquet data sets and a single-threaded torch."""

import pytest
import torch

from verl.utils.synthetic_tasks import write_rows, write_task_files


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread; several threads thrash on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def arith_seq_files(tmp_path_factory):
    """{"train": path, "test": path} of the arithmetic-sequence task (4096 / 64 rows)."""
    return write_task_files("arith_seq", tmp_path_factory.mktemp("arith_seq"), 4096, 64, seed=0)


@pytest.fixture
def plain_rows_file(tmp_path):
    """A parquet file with a plain-string prompt column and a plain "response" column."""
    rows = [{"question": "2+2=", "response": "4"}, {"question": "10+5=", "response": "15"}]
    return write_rows(rows, tmp_path / "plain.parquet")


@pytest.fixture(scope="session")
def conversation_files(tmp_path_factory):
    """{"train", "test"} parquet files of arithmetic-sequence conversations (``messages`` column), 128 / 16 rows."""
    from verl.utils.synthetic_tasks import make_rows

    folder = tmp_path_factory.mktemp("conversations")
    files = {}
    for split, size in (("train", 128), ("test", 16)):
        rows = [
            {**row, "messages": [*row["prompt"], {"role": "assistant", "content": row["reward_model"]["ground_truth"]}]}
            for row in make_rows("arith_seq", size, seed=0, split=split)
        ]
        files[split] = write_rows(rows, folder / f"{split}.parquet")
    return files
