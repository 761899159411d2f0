"""``model.use_fused_kernels``: the policy's output head computes log-probs and entropy, never the logits.

The head is checked once, when the actor is built (:func:`check_fused_head`); for the forward of one micro-batch
its ``forward`` is swapped for
:func:`~verl.utils.fused_linear_logprob.linear_logprobs_and_entropy`: the causal LM still runs its own forward (so
FSDP's hooks gather and release the head's weight as usual, and ``logits_to_keep`` still picks the response slots),
but where it would compute ``[tokens, vocab]`` logits it gets ``[tokens, 2]``: each slot's log-prob of its label
and its entropy, made chunk by chunk. The swap is undone when the forward returns.

Only a head that is a plain ``nn.Linear`` applied last qualifies: a model that rescales or soft-caps its logits after
the head (Gemma's ``final_logit_softcapping``, Cohere's ``logit_scale``, Granite's ``logits_scaling``) or a LoRA
adapter on the head would be scored wrongly, so they are refused when the actor is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from verl.utils.fused_linear_logprob import linear_logprobs_and_entropy
from verl.workers.actor.token_forward import keeps_selected_logits

__all__ = ["FUSED_KERNELS_KEY", "check_fused_head", "fused_lm_head"]

FUSED_KERNELS_KEY = "model.use_fused_kernels"

# config attributes of Hugging Face models that transform the logits after the head, and their no-op values
_LOGIT_TRANSFORMS = {"final_logit_softcapping": None, "logit_scale": 1.0, "logits_scaling": 1.0}


def _base_model(module: nn.Module) -> nn.Module:
    return module.get_base_model() if callable(getattr(module, "get_base_model", None)) else module


def check_fused_head(module: nn.Module, key: str = FUSED_KERNELS_KEY) -> nn.Linear:
    """The module's LM head, after checking the fused path computes what the model's own forward would."""
    base = _base_model(module)
    name = type(base).__name__
    if not keeps_selected_logits(module):
        raise ValueError(
            f"{key}=true needs a causal LM whose forward takes logits_to_keep; {name} does not "
            "(set it to false for this model)"
        )
    get_head = getattr(base, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, nn.Linear):
        raise ValueError(
            f"{key}=true needs the model's output head to be a torch.nn.Linear; {name} has "
            f"{type(head).__name__} (a LoRA adapter on the head, or no head): set it to false"
        )
    config = getattr(base, "config", None)
    for attr, neutral in _LOGIT_TRANSFORMS.items():
        value = getattr(config, attr, neutral)
        if value != neutral:
            raise ValueError(
                f"{key}=true: {name} applies {attr}={value!r} to its logits after the head, which the "
                "fused kernel does not; set it to false for this model"
            )
    return head


@contextlib.contextmanager
def fused_lm_head(
    head: nn.Linear,
    labels: torch.Tensor,
    temperature: float,
    *,
    calculate_entropy: bool = False,
    entropy_grad: bool = False,
    key: str = FUSED_KERNELS_KEY,
) -> Iterator[None]:
    """Inside the block, ``head`` (the model's output head, as :func:`check_fused_head` returned it) returns
    ``[..., 2]`` (log-prob of ``labels``, entropy) instead of logits, or ``[..., 1]`` (log-prob) without
    ``calculate_entropy``.

    ``labels`` are the token ids each kept position scores, in the order the head sees them (``[B, R]`` responses
    for ``logits_to_keep`` slots); the logits are divided by ``temperature`` first, as the unfused path does. The
    entropy carries a gradient only with ``entropy_grad``, so backward skips its term otherwise.
    """

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        if hidden.shape[:-1].numel() != labels.numel():
            raise ValueError(
                f"{key}: the head received {hidden.shape[:-1].numel()} positions for {labels.numel()} "
                "labels; the model must apply logits_to_keep before its head"
            )
        log_probs, entropy = linear_logprobs_and_entropy(
            hidden, head.weight, labels.reshape(hidden.shape[:-1]), bias=head.bias, temperature=temperature
        )
        if not calculate_entropy:
            return log_probs.unsqueeze(-1)
        return torch.stack([log_probs, entropy if entropy_grad else entropy.detach()], dim=-1)

    previous = head.__dict__.get("forward")
    head.forward = forward
    try:
        yield
    finally:
        if previous is None:
            del head.forward
        else:
            head.forward = previous
