"""The embedded engine: continuous batching with a KV cache over a transformers causal LM."""

from verl.workers.rollout.hf.server import HFRolloutServer

__all__ = ["HFRolloutServer"]
