"""Process-wide logging setup for verl's loggers (``VERL_LOGGING_LEVEL`` picks the level, default INFO)."""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["configure_verl_logging", "log_to_file", "set_basic_config"]

_FORMAT = "%(levelname)s:%(asctime)s:%(message)s"


def configure_verl_logging() -> None:
    """Give the ``verl`` logger its own stderr handler and stop propagation, so a library that reconfigures the
    root logger neither silences nor duplicates verl's messages."""
    level = os.environ.get("VERL_LOGGING_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(stream=sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(_FORMAT))
    verl_logger = logging.getLogger("verl")
    verl_logger.handlers = [handler]
    verl_logger.setLevel(level)
    verl_logger.propagate = False


def set_basic_config(level: int | str) -> None:
    """``logging.basicConfig`` with verl's message format."""
    logging.basicConfig(format=_FORMAT, level=level)


def log_to_file(string: str) -> None:
    """Print ``string`` and, when a ``logs/`` folder exists, append it to ``logs/log_<rank>``."""
    print(string)
    if not os.path.isdir("logs"):
        return
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    with open(os.path.join("logs", f"log_{rank}"), "a+") as f:
        f.write(string + "\n")
