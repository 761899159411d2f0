"""Rollout: one token-level server contract, several engines (hf built in; vllm, sglang optional)."""

from verl.workers.rollout.base import BaseRollout, RolloutServer, TokenOutput
from verl.workers.rollout.registry import get_rollout_class, list_rollouts, register_rollout
from verl.workers.rollout.replica import RolloutReplica, StandaloneReplica, build_server, server_class

__all__ = [
    "BaseRollout",
    "TokenOutput",
    "RolloutServer",
    "RolloutReplica",
    "StandaloneReplica",
    "build_server",
    "server_class",
    "register_rollout",
    "get_rollout_class",
    "list_rollouts",
]
