"""Process-wide DataProto switches, read as class attributes: ``DataProtoConfig.auto_padding = True``.

Auto padding lets a worker-group call split a DataProto whose length does not divide the number of ranks:
dispatch pads it with copies of its last row (:meth:`verl.protocol.DataProto.padding`), chunks it evenly and
strips the padded rows from the collected output. It is on when any of these holds:

- the ``VERL_AUTO_PADDING`` environment variable is ``1`` / ``true`` (any case);
- ``DataProtoConfig.auto_padding = True`` was set in this process;
- the DataProto itself carries ``meta_info[DataProtoConfig.auto_padding_key] = True``
  (what ``DataProto.from_dict(..., auto_padding=True)`` sets).

Without it, ``DataProto.chunk`` requires the length to divide the number of chunks.
"""

from __future__ import annotations

import os

__all__ = ["AUTO_PADDING_ENV", "PADDING_SIZE_KWARG", "DataProtoConfig"]

AUTO_PADDING_ENV = "VERL_AUTO_PADDING"

# The keyword a dispatch function adds to the call's kwargs to tell the caller how many padded rows to strip
# from the collected output; the caller pops it before the workers see the kwargs. Upstream's value.
PADDING_SIZE_KWARG = "_padding_size_key_x123d"


class _DataProtoConfigMeta(type):
    """Metaclass so the switches read and write as plain class attributes, with the env var folded in."""

    _settings: dict[str, bool] = {}

    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        from_env = os.getenv(AUTO_PADDING_ENV, "false").strip().lower() in ("1", "true")
        return from_env or cls._settings.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"DataProtoConfig.auto_padding must be a bool, got {enabled!r}")
        cls._settings[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide DataProto switches (see the module docstring); never instantiated."""
