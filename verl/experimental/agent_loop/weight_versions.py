"""Weight-version tags of a trajectory, carried in the results.

A server manager that survives weight syncs (``PartialRolloutServerManager``) reports on every call, in
``TokenOutput.extra``, the weight version the call's first token came from (``min_global_steps``, verl's name), the
one its last token came from (``max_global_steps``) and how many syncs interrupted it (``num_aborts``). A sync that
keeps requests (``async_training.keep_requests_through_sync``) interrupts nothing: a call then starts under one
version and ends under a later one with ``num_aborts`` 0, and the start stays the version it started under (the
staleness account) while the end is the version of its last token. Agent loops
fold the calls of one trajectory into its ``AgentLoopOutput.extra_fields`` with :func:`merge_version_tags`; the
worker turns ``extra_fields`` into batch columns, which the rollouter reads. Calls that report no versions (the
synchronous trainer's manager) leave the fields unset; a custom loop that does not merge them gets the rollouter's
fallback (the versions current when the sample started and ended).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["VERSION_KEYS", "merge_version_tags"]

VERSION_KEYS = ("min_global_steps", "max_global_steps", "num_aborts")


def merge_version_tags(fields: MutableMapping[str, Any], call_extra: Mapping[str, Any] | None) -> None:
    """Fold one call's version tags (``call_extra``, a ``TokenOutput.extra``) into a trajectory's ``fields``:
    the lowest start, the highest end, the sum of the aborts."""
    if not call_extra:
        return
    start, end, aborts = (call_extra.get(key) for key in VERSION_KEYS)
    if start is not None:
        known = fields.get("min_global_steps")
        fields["min_global_steps"] = int(start) if known is None else min(int(known), int(start))
    if end is not None:
        known = fields.get("max_global_steps")
        fields["max_global_steps"] = int(end) if known is None else max(int(known), int(end))
    if aborts is not None:
        fields["num_aborts"] = int(fields.get("num_aborts") or 0) + int(aborts)
