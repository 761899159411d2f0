"""Rank-aware printing/logging helpers; see :mod:`verl.utils.logger.aggregate_logger`."""

from verl.utils.logger.aggregate_logger import (
    DecoratorLoggerBase,
    LocalLogger,
    log_with_rank,
    print_rank_0,
    print_with_rank,
    print_with_rank_and_timer,
)

__all__ = [
    "DecoratorLoggerBase",
    "LocalLogger",
    "log_with_rank",
    "print_rank_0",
    "print_with_rank",
    "print_with_rank_and_timer",
]
