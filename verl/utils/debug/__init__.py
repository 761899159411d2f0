"""verl's pre-0.5 home of the profiling helpers: every name of :mod:`verl.utils.profiler`, under its old path."""

from verl.utils.profiler import *  # noqa: F403
from verl.utils.profiler import __all__ as _profiler_names

__all__ = list(_profiler_names)
