"""The actor worker with the agent-loop mixin, as ActorRolloutRefWorker would inherit it (hybrid-mode tests)."""

from verl.experimental.agent_loop.hybrid_server import HybridRolloutServerMixin
from verl.workers.fsdp_workers import ActorRolloutRefWorker


class HybridRolloutWorker(HybridRolloutServerMixin, ActorRolloutRefWorker):
    pass
