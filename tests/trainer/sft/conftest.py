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
