"""verl's module path of the fully-async rollouter.

``FullyAsyncRollouter`` is this recipe's :class:`~verl.experimental.fully_async_policy.rollouter.Rollouter` (the Ray
actor that owns the prompt stream and the agent loops on the standalone replicas); ``FullyAsyncAgentLoopManager``
is the agent-loop driver over standalone replicas whose requests survive weight syncs.
"""

from verl.experimental.fully_async_policy.rollouter import Rollouter as FullyAsyncRollouter
from verl.experimental.separation.rollout_pool import StandaloneAgentLoopManager as FullyAsyncAgentLoopManager

__all__ = ["FullyAsyncAgentLoopManager", "FullyAsyncRollouter"]
