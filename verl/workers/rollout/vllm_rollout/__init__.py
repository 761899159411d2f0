"""verl's ``verl.workers.rollout.vllm_rollout``: vLLM as the rollout engine (the ``vllm`` extra).

This package runs vLLM through one adapter, :class:`~verl.workers.rollout.vllm.server.VLLMRolloutServer`
(``rollout.name=vllm``), behind the token-level rollout contract. verl's names map onto it:

- ``vLLMRollout`` / ``vLLMAsyncRollout`` / ``ServerAdapter``: the engine inside a hybrid actor worker, with batch
  ``generate_sequences`` (:mod:`.vllm_rollout`);
- ``vLLMReplica`` / ``AsyncvLLMServer``: a standalone vLLM replica actor / the server class (:mod:`.vllm_async_server`);
- ``get_vllm_max_lora_rank`` and vLLM's LoRA constants (:mod:`.utils`); ``load_dtensor_weights``.

Importing needs no vLLM; building an engine without it raises ``MissingExtraError`` naming ``pip install
verl[vllm]``. ``vllm_mode`` is ``"spmd"``: stock vLLM (not verl's old patched fork, ``"customized"``).
"""

from verl.workers.rollout.vllm_rollout.vllm_rollout import (
    FIREvLLMRollout,
    ServerAdapter,
    load_dtensor_weights,
    vLLMAsyncRollout,
    vLLMRollout,
)

__all__ = ["FIREvLLMRollout", "ServerAdapter", "load_dtensor_weights", "vLLMAsyncRollout", "vLLMRollout", "vllm_mode"]

vllm_mode = "spmd"
