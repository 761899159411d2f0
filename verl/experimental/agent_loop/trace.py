"""Which trajectory the current task works on: verl's ``rollout_trace_attr`` and ``get_trajectory_info``.

The worker runs each sample's loop inside ``rollout_trace_attr(step=..., sample_index=..., rollout_n=...)``; code
running in that task (the loop, its tools, the server manager) can ask :func:`current_trajectory` which sample it
serves, e.g. to label a log line. The context lives in :mod:`verl.utils.rollout_trace`.
"""

from verl.utils.rollout_trace import current_trajectory, get_trajectory_info
from verl.utils.rollout_trace import trajectory_attr as rollout_trace_attr

__all__ = ["current_trajectory", "get_trajectory_info", "rollout_trace_attr"]
