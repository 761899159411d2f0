"""Wire format of a batch of token-level requests or results crossing one Ray call.

Ray serializes a list element by element, calling its pickler once for every object that is not a plain
msgpack value (each ``TokenOutput``, each exception): for a hundred short answers that costs more than the
answers' bytes. Packing the whole list into one ``bytes`` with the standard pickler costs one call, so the batch
methods of the hybrid engine accept and return packed batches (and plain lists, for other callers).
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["pack_batch", "unpack_batch"]


def _sendable(item: Any) -> Any:
    """``item``, or for an exception that does not pickle, a RuntimeError carrying its description."""
    if not isinstance(item, BaseException):
        return item
    try:
        pickle.dumps(item)
        return item
    except Exception:
        return RuntimeError(f"{type(item).__name__}: {item}")


def pack_batch(items: list[Any]) -> bytes:
    """One ``bytes`` for the whole list; exceptions that cannot be pickled travel as RuntimeErrors naming them."""
    try:
        return pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return pickle.dumps([_sendable(item) for item in items], protocol=pickle.HIGHEST_PROTOCOL)


def unpack_batch(data: bytes | list[Any]) -> list[Any]:
    """Inverse of :func:`pack_batch`; a plain list passes through."""
    if isinstance(data, bytes | bytearray | memoryview):
        return list(pickle.loads(data))
    return list(data)
