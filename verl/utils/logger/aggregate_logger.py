"""Rank-aware printing and logging helpers (verl's ``verl.utils.logger``).

Every rank of a worker group runs the same code; without a rank filter each message appears once per process.
These helpers prefix messages with the rank and, when asked, keep only rank 0's copy.
"""

from __future__ import annotations

import datetime
import logging
import numbers
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DecoratorLoggerBase",
    "LocalLogger",
    "concat_dict_to_str",
    "log_with_rank",
    "print_rank_0",
    "print_with_rank",
    "print_with_rank_and_timer",
]


def concat_dict_to_str(data: Mapping[str, Any], step: int) -> str:
    """``step:<n> - key:value - ...`` over the numeric entries of ``data`` (others are skipped)."""
    parts = [f"step:{step}"]
    parts += [f"{key}:{value!r}" for key, value in data.items() if isinstance(value, numbers.Number)]
    return " - ".join(parts)


class LocalLogger:
    """A tracking backend that prints each step's numeric metrics on one line."""

    def __init__(self, print_to_console: bool = True) -> None:
        self.print_to_console = print_to_console

    def log(self, data: Mapping[str, Any], step: int) -> None:
        if self.print_to_console:
            print(concat_dict_to_str(data, step=step), flush=True)

    def flush(self) -> None:
        """Nothing is buffered; kept for the tracking-backend interface."""


class DecoratorLoggerBase:
    """Base of logging decorators: writes ``"<role> <message>"`` through ``logger`` at ``level`` (or ``print``
    when no logger is given), only on rank 0 when ``log_only_rank_0``."""

    def __init__(
        self,
        role: str,
        logger: logging.Logger | None = None,
        level: int = logging.DEBUG,
        rank: int = 0,
        log_only_rank_0: bool = True,
    ) -> None:
        self.role = role
        self.logger = logger
        self.level = level
        self.rank = rank
        self.log_only_rank_0 = log_only_rank_0
        self.logging_function = self.log_by_print if logger is None else self.log_by_logging

    def _active(self) -> bool:
        return not self.log_only_rank_0 or self.rank == 0

    def log_by_print(self, log_str: str) -> None:
        if self._active():
            print(f"{self.role} {log_str}", flush=True)

    def log_by_logging(self, log_str: str) -> None:
        if self.logger is None:
            raise ValueError(f"{type(self).__name__}({self.role!r}) has no logger to log with")
        if self._active():
            self.logger.log(self.level, f"{self.role} {log_str}")


def _dist_rank() -> int | None:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def print_rank_0(message: Any) -> None:
    """Print on rank 0 of the default process group (or always, outside torch.distributed)."""
    if _dist_rank() in (None, 0):
        print(message, flush=True)


def print_with_rank(message: str, rank: int = 0, log_only_rank_0: bool = False) -> None:
    """Print ``[Rank r] message`` (only for rank 0 when ``log_only_rank_0``)."""
    if not log_only_rank_0 or rank == 0:
        print(f"[Rank {rank}] {message}", flush=True)


def print_with_rank_and_timer(message: str, rank: int = 0, log_only_rank_0: bool = False) -> None:
    """:func:`print_with_rank` with a ``[YYYY-mm-dd HH:MM:SS]`` timestamp in front."""
    if not log_only_rank_0 or rank == 0:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{stamp}] [Rank {rank}] {message}", flush=True)


def log_with_rank(
    message: str, rank: int, logger: logging.Logger, level: int = logging.INFO, log_only_rank_0: bool = False
) -> None:
    """``logger.log(level, "[Rank r] message")`` (only for rank 0 when ``log_only_rank_0``)."""
    if not log_only_rank_0 or rank == 0:
        logger.log(level, f"[Rank {rank}] {message}")
