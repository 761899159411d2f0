"""The error raised when data breaks a DataProto / TensorDict contract (uneven chunks, clashing values, bad shapes).

Upstream verl signals these cases with ``assert``, so code written against it catches ``AssertionError``, while
this project's callers catch ``ValueError``. :class:`DataProtoError` derives from both, so either ``except`` works,
and unlike a bare ``assert`` it still fires under ``python -O``.
"""

from __future__ import annotations

__all__ = ["DataProtoError"]


class DataProtoError(ValueError, AssertionError):
    """Invalid data for a DataProto / TensorDict operation; the message names the offending key, part or size."""
