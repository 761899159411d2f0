"""vLLM inside a hybrid actor worker: verl's ``vLLMRollout`` / ``vLLMAsyncRollout`` / ``ServerAdapter``.

All three are this package's :class:`~verl.workers.fsdp.hybrid_rollout.HybridRollout` with the engine pinned to
vLLM (:class:`~verl.workers.rollout.vllm.server.VLLMRolloutServer`): batch ``generate_sequences``, the token-level
server contract (``replica``), weight updates, sleep / wake-up. They take verl's constructor signatures:
``vLLMRollout(model_path, config, tokenizer, model_hf_config)`` (verl <= 0.5) or
``vLLMRollout(config, model_config, device_mesh)`` (verl >= 0.6). ``FIREvLLMRollout`` (FIRE sampling: a hotter
first token) is not part of this build.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from verl.utils.device import get_device_name
from verl.utils.extras import require_package, unavailable_class
from verl.workers.fsdp.hybrid_rollout import HybridRollout
from verl.workers.rollout.base import as_model_config, as_rollout_config
from verl.workers.rollout.utils import model_path_of

__all__ = ["FIREvLLMRollout", "ServerAdapter", "load_dtensor_weights", "vLLMAsyncRollout", "vLLMRollout"]


def _pad_token_id(tokenizer: Any) -> int:
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return 0


class vLLMRollout(HybridRollout):  # noqa: N801 - verl's class name
    """The hybrid worker's vLLM engine (see the module docstring for the accepted signatures).

    Args:
        model_path_or_config: the checkpoint folder (old signature) or the rollout config (new signature).
        config: the rollout config (old) or the model config with ``path`` / ``local_path`` (new).
        tokenizer: pads responses with its pad token (else EOS); the new signature reads ``model_config.tokenizer``.
        model_hf_config: accepted for verl's signature; vLLM reads the checkpoint's own config.
        device_mesh: accepted for verl's signature; vLLM sets up its own parallel groups.
        pad_token_id: overrides the tokenizer's pad token.
    """

    def __init__(
        self,
        model_path_or_config: Any,
        config: Any = None,
        tokenizer: Any = None,
        model_hf_config: Any = None,
        *,
        device_mesh: Any = None,
        pad_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        require_package("vllm", extra="vllm", what=type(self).__qualname__, feature="the vLLM engine")
        if isinstance(model_path_or_config, str):
            model_path, rollout_config, model_config = model_path_or_config, config, None
        else:
            rollout_config, model_config = model_path_or_config, config
            if model_config is None:
                raise ValueError(f"{type(self).__qualname__}(config, model_config, ...): model_config is required")
            model_config = as_model_config(model_config)
            model_path = model_path_of(model_config)
            if tokenizer is None:
                tokenizer = model_config.tokenizer
        if rollout_config is None:
            raise ValueError(f"{type(self).__qualname__}: a rollout config is required")
        rollout_config = dataclasses.replace(as_rollout_config(rollout_config), name="vllm")
        pad = pad_token_id if pad_token_id is not None else _pad_token_id(tokenizer)
        self.model_config = model_config
        super().__init__(rollout_config, model_path, torch.device(get_device_name()), pad)


vLLMAsyncRollout = vLLMRollout


class ServerAdapter(vLLMRollout):
    """verl 0.9's worker-side vLLM adapter: ``ServerAdapter(config, model_config, device_mesh, replica_rank)``."""

    def __init__(
        self, config: Any, model_config: Any, device_mesh: Any = None, replica_rank: int = -1, **kwargs: Any
    ) -> None:
        self.replica_rank = int(replica_rank)
        super().__init__(config, model_config, device_mesh=device_mesh, **kwargs)


FIREvLLMRollout = unavailable_class(
    "FIREvLLMRollout",
    __name__,
    "FIRE sampling (a higher temperature for the first response token)",
    package="vllm",
    extra="vllm",
    reason="the vLLM adapter here samples every token with the rollout's settings",
    base=vLLMRollout,
)


def load_dtensor_weights(actor_weights: dict[str, torch.Tensor], vllm_model: Any) -> int:
    """Load the trainer's (possibly sharded, DTensor) weights into a vLLM model through its ``load_weights``.

    Each DTensor is gathered to its full tensor first; returns the number of tensors loaded.
    """
    load = getattr(vllm_model, "load_weights", None)
    if not callable(load):
        raise TypeError(f"load_dtensor_weights: {type(vllm_model).__name__} has no load_weights(weights) method")
    weights = [
        (name, tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor)
        for name, tensor in actor_weights.items()
    ]
    load(weights=weights)
    return len(weights)
