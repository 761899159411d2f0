"""``HFRollout``: batch generation with a live Hugging Face module (verl's ``verl.workers.rollout.hf_rollout``).

verl's HFRollout calls ``module.generate`` on the actor's own module. Here the same module is served by this
package's ``hf`` engine (:class:`~verl.workers.rollout.hf.server.HFRolloutServer`, continuous batching with a KV
cache), and ``generate_sequences`` lays the batch out as the hybrid worker's rollout does
(:meth:`verl.workers.fsdp.hybrid_rollout.HybridRollout.generate_sequences`): ``prompts``, ``responses`` (right
padded to ``config.response_length``), ``response_mask``, ``input_ids``, ``attention_mask``, ``position_ids``,
``rollout_log_probs`` with ``calculate_log_probs``. Sampling settings come from ``config`` and may be overridden per
batch in ``meta_info`` (``temperature``, ``top_p``, ``top_k``, ``do_sample``, ``n``, ``validate``).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from verl.workers.fsdp.hybrid_rollout import AsyncLoopThread, HybridRollout
from verl.workers.rollout.base import as_rollout_config
from verl.workers.rollout.batch_rendezvous import BatchRendezvous
from verl.workers.rollout.hf.server import HFRolloutServer

__all__ = ["HFRollout"]


def _pad_token_id(module: nn.Module) -> int:
    for source in (getattr(module, "generation_config", None), getattr(module, "config", None)):
        for name in ("pad_token_id", "eos_token_id"):
            value = getattr(source, name, None)
            if isinstance(value, list | tuple):
                value = value[0] if value else None
            if value is not None:
                return int(value)
    return 0


class HFRollout(HybridRollout):
    """Generate with ``module`` itself (no second copy of the weights).

    Args:
        module: a Hugging Face causal LM (put in eval mode by the engine).
        config: the rollout config (a ``RolloutConfig``, or an OmegaConf node, mapping or ``SimpleNamespace`` of its
            keys, built into one).
        pad_token_id: pads the responses; default the model's pad token, else its EOS token, else 0.
        call_timeout_s: bound on one batch.
    """

    def __init__(
        self, module: nn.Module, config: Any, pad_token_id: int | None = None, call_timeout_s: float = 3600.0
    ) -> None:
        param = next(module.parameters())
        self.config = config = as_rollout_config(config)
        self.device = param.device
        self.dtype = param.dtype
        self.pad_token_id = int(pad_token_id) if pad_token_id is not None else _pad_token_id(module)
        self.call_timeout_s = call_timeout_s
        self.module = module
        self.replica = HFRolloutServer(config, model=module, device=param.device)
        self.loop = AsyncLoopThread(name="verl-hf-rollout-loop")
        self.rendezvous = BatchRendezvous()
        self.asleep = False
