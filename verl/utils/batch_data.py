"""One place that knows how each batch type splits across ranks and joins back (used by worker-group dispatch).

Dispatch functions chunk an argument into one part per rank and concatenate the per-rank outputs. The types
that travel this way are DataProto, DataProtoFuture (chunked lazily, resolved on the worker), plain
TensorDicts (:mod:`verl.utils.tensordict_utils`) and Ray object refs of DataProtos (concatenated into a
DataProtoFuture). :class:`BatchData` wraps a value so callers never branch on its type.
TransferQueue metadata batches (upstream's ``BatchMeta``) are not supported: this project has no TransferQueue.
"""

from __future__ import annotations

import sys
from typing import Any

from tensordict import TensorDict

__all__ = ["BatchData"]


def _is_object_ref(value: Any) -> bool:
    ray = sys.modules.get("ray")  # a ref can only exist once Ray is imported
    return ray is not None and isinstance(value, ray.ObjectRef)


class BatchData:
    """Wrap a batch (to chunk it) or a list of per-rank results (to concatenate them)."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def is_chunkable(self) -> bool:
        from verl.protocol import DataProto, DataProtoFuture

        return isinstance(self._data, (DataProto, DataProtoFuture, TensorDict))

    def is_concatable(self) -> bool:
        from verl.protocol import DataProto

        data = self._data
        if not isinstance(data, (list, tuple)) or not data:
            return False
        return isinstance(data[0], (DataProto, TensorDict)) or _is_object_ref(data[0])

    def chunk(self, chunks: int) -> list | tuple:
        """``chunks`` parts of the wrapped batch, each of the batch's own type. TensorDict parts are made
        contiguous and consolidated, so each ships to its rank as one buffer."""
        from verl.utils.tensordict_utils import chunk_tensordict, contiguous

        data = self._data
        if isinstance(data, TensorDict):
            return tuple(contiguous(part).consolidate() for part in chunk_tensordict(data, chunks))
        if not self.is_chunkable():
            raise TypeError(
                f"cannot chunk a {type(data).__name__}: expected a DataProto, DataProtoFuture or TensorDict"
            )
        return data.chunk(chunks=chunks)

    def concat(self) -> Any:
        """The per-rank results joined into one value of their type (object refs give a DataProtoFuture)."""
        from verl.protocol import DataProtoFuture
        from verl.utils.tensordict_utils import concat_tensordict

        data = list(self._data) if isinstance(self._data, (list, tuple)) else self._data
        if not isinstance(data, list) or not data:
            raise ValueError("BatchData.concat needs a non-empty list of per-rank results")
        first = data[0]
        if _is_object_ref(first):
            return DataProtoFuture.concat(data)
        if isinstance(first, TensorDict):
            return concat_tensordict(data)
        if not self.is_concatable():
            raise TypeError(f"cannot concatenate {type(first).__name__} results: expected DataProto or TensorDict")
        return type(first).concat(data)
