"""actor.entropy_checkpointing: the entropy is recomputed in backward, with the same gradients as without."""

from __future__ import annotations

import copy

import pytest
import torch
from _actor_batches import response_micro_batch
from tensordict import TensorDict
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.config.actor import FSDPActorConfig

PROMPT_LEN, RESPONSE_LEN, ROWS = 4, 5, 3


class CountOps(TorchDispatchMode):
    """Counts the aten ops that run under it, by name (``aten.logsumexp`` runs in the entropy's forward only)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()


def micro_batch(vocab_size: int) -> TensorDict:
    return response_micro_batch(vocab_size, ROWS, PROMPT_LEN, RESPONSE_LEN)


def grads_and_recomputes(base_model, checkpointing: bool, chunking: bool) -> tuple[list[torch.Tensor], int]:
    """Parameter gradients of ``sum(log_prob) - 0.3 * sum(entropy)`` and how often the backward ran logsumexp."""
    model = copy.deepcopy(base_model)
    config = FSDPActorConfig(
        ppo_mini_batch_size=ROWS,
        ppo_micro_batch_size_per_gpu=ROWS,
        entropy_checkpointing=checkpointing,
        entropy_from_logits_with_chunking=chunking,
    )
    actor = DataParallelPPOActor(config, model)
    log_probs, entropy = actor._forward_responses(
        micro_batch(model.config.vocab_size), temperature=0.7, calculate_entropy=True, entropy_grad=True
    )
    loss = log_probs.sum() - 0.3 * entropy.sum()
    with CountOps() as ops:
        loss.backward()
    return [p.grad.clone() for p in model.parameters()], ops.counts.get("logsumexp", 0)


@pytest.mark.parametrize("chunking", [False, True])
def test_checkpointed_entropy_has_the_same_gradients_and_is_recomputed(base_model, chunking):
    plain, plain_recomputes = grads_and_recomputes(base_model, checkpointing=False, chunking=chunking)
    checkpointed, recomputes = grads_and_recomputes(base_model, checkpointing=True, chunking=chunking)
    assert plain_recomputes == 0
    assert recomputes > 0, "the entropy's forward did not run again in backward"
    assert any(g.abs().max() > 0 for g in plain)
    for a, b in zip(plain, checkpointed):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
