"""Agent loops: prompts in, token-level trajectories out, talking token-in-token-out to the rollout replicas.

See docs/agent_loop.md. Public names (verl's): AgentLoopBase, AgentLoopOutput, AgentLoopManager, AgentLoopWorker,
get_trajectory_info; also AgentLoopMetrics, AsyncLLMServerManager, SingleTurnAgentLoop, ToolAgentLoop, register,
get_agent_loop_class.
"""

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.manager import AgentLoopManager
from verl.experimental.agent_loop.registry import (
    get_agent_loop_class,
    list_agent_loops,
    load_agent_loop_config,
    register,
)
from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.experimental.agent_loop.trace import get_trajectory_info
from verl.experimental.agent_loop.worker import AgentLoopWorker
from verl.utils.import_utils import lazy_exports

__all__ = [
    "AgentLoopBase",
    "AgentLoopManager",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "AgentLoopWorker",
    "AsyncLLMServerManager",
    "SingleTurnAgentLoop",
    "get_agent_loop_class",
    "get_trajectory_info",
    "list_agent_loops",
    "load_agent_loop_config",
    "register",
]


# The tool loop lives in its own module (and pulls in the tools package): import it only when asked for.
__getattr__ = lazy_exports(__name__, {"ToolAgentLoop": "verl.experimental.agent_loop.tool_agent_loop"})
