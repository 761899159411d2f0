"""verl 0.4-0.5's ``verl.workers.rollout.async_server``: the async rollout mode's server manager and scheduler.

``AsyncLLMServerManager`` is the agent loops' router over the rollout replicas
(:class:`verl.experimental.agent_loop.server_manager.AsyncLLMServerManager`). ``ChatCompletionScheduler`` (verl's
first multi-turn driver, which sent OpenAI chat completions to HTTP servers and rebuilt the batch with callbacks)
was replaced by the agent loops upstream and is not part of this build: it imports and raises ``MissingExtraError``
when built. Multi-turn rollouts run through :mod:`verl.experimental.agent_loop` (``ToolAgentLoop``, or any agent
written against the OpenAI client through :mod:`verl.experimental.agent_loop.openai_gateway`).
"""

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.utils.extras import unavailable_class

__all__ = ["AsyncLLMServerManager", "ChatCompletionScheduler"]

ChatCompletionScheduler = unavailable_class(
    "ChatCompletionScheduler",
    __name__,
    "verl 0.4's chat-completion scheduler",
    reason="verl replaced it with the agent loops; use verl.experimental.agent_loop (ToolAgentLoop, or an "
    "OpenAI-client agent through its openai_gateway)",
)
