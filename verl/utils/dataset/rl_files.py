"""RLHFDataset's file side: one data file as an arrow table, and the rows ``max_samples`` keeps.

Parquet is the row format; ``.json`` (a list of row objects, or one object a line) and ``.jsonl`` files are read too,
as verl reads them. ``max_samples`` keeps verl's meaning and draw: the first rows, or with ``shuffle`` a draw
without replacement from ``numpy.random.default_rng(seed)``, so the same seed keeps the same rows as verl does.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from verl.utils.shm import maybe_shm_copy

__all__ = ["JSON_SUFFIXES", "read_data_file", "sample_row_indices"]

JSON_SUFFIXES = (".json", ".jsonl")


def _read_json(source: str, path: str) -> pa.Table:
    import pyarrow.json as pj

    with open(source, "rb") as f:
        head = f.read(4096).lstrip()
    try:
        if head.startswith(b"["):  # one JSON array of rows
            with open(source, encoding="utf-8") as f:
                rows = json.load(f)
            if not all(isinstance(row, dict) for row in rows):
                raise ValueError("the array must hold one object per row")
            return pa.Table.from_pylist(rows)
        return pj.read_json(source)  # one object a line
    except ValueError as err:  # json's decode errors and pyarrow's ArrowInvalid are ValueErrors
        raise ValueError(f"cannot read the rows of {path}: {err}") from err


def read_data_file(path: str, use_shm: bool = False) -> pa.Table:
    """The rows of ``path`` (JSON by suffix, parquet otherwise); with ``use_shm`` read from its shared-memory copy.
    Errors keep naming ``path``, not the copy."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    source = maybe_shm_copy(path, use_shm, "data.use_shm")
    if path.endswith(JSON_SUFFIXES):
        return _read_json(source, path)
    return pq.read_table(source)


def sample_row_indices(total: int, max_samples: int, shuffle: bool, seed: int | None) -> list[int] | None:
    """The rows ``max_samples`` keeps out of ``total``, in the order they are kept; ``None`` keeps all of them
    (``max_samples`` <= 0, verl's ``-1``, or at least ``total``)."""
    if max_samples is None or max_samples <= 0 or max_samples >= total:
        return None
    if shuffle:
        return np.random.default_rng(seed).choice(total, size=max_samples, replace=False).tolist()
    return list(range(max_samples))
