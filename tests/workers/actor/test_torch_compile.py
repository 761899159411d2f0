"""actor.use_torch_compile: log-probs and entropy run compiled (dynamic shapes), with the values and gradients of
eager."""

from __future__ import annotations

import copy

import pytest
import torch
from test_entropy_checkpointing import ROWS, micro_batch
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM

from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.config.actor import FSDPActorConfig


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()


def entropy_and_grads(base_model, compiled: bool, rows: int = ROWS):
    model = copy.deepcopy(base_model)
    config = FSDPActorConfig(ppo_mini_batch_size=ROWS, ppo_micro_batch_size_per_gpu=ROWS, use_torch_compile=compiled)
    actor = DataParallelPPOActor(config, model)
    micro = micro_batch(model.config.vocab_size)[:rows]
    log_probs, entropy = actor._forward_responses(micro, temperature=0.7, calculate_entropy=True, entropy_grad=True)
    (log_probs.sum() - 0.3 * entropy.sum()).backward()
    return (log_probs.detach(), entropy.detach()), [p.grad.clone() for p in model.parameters()]


def test_compiled_kernels_match_eager_and_are_compiled_once_for_other_shapes(base_model):
    torch._dynamo.reset()
    counters.clear()
    eager_values, eager_grads = entropy_and_grads(base_model, compiled=False)
    assert counters["stats"]["unique_graphs"] == 0
    values, grads = entropy_and_grads(base_model, compiled=True)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1, "use_torch_compile did not compile anything"
    for a, b in zip(values, eager_values):  # log-probs, entropy
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, eager_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    entropy_and_grads(base_model, compiled=True, rows=ROWS - 1)  # another token count: no recompilation
    assert counters["stats"]["unique_graphs"] == graphs


def test_compiled_kernels_handle_uneven_chunks_and_masked_logits():
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(10, 37, generator=gen) * 30).requires_grad_()
    with torch.no_grad():
        logits[2, :5] = float("-inf")  # masked vocabulary entries
    weights = torch.randn(2, 10, generator=gen)
    labels = torch.randint(5, 37, (10,), generator=gen)
    results = []
    for compiled in (False, True):
        logits.grad = None
        entropy = entropy_from_logits(logits, chunk_size=4, compiled=compiled)  # chunks of 4, 4 and 2 rows
        log_probs = logprobs_from_logits(logits, labels, chunk_size=4, compiled=compiled)
        (entropy * weights[0] + log_probs * weights[1]).sum().backward()
        results.append((entropy.detach(), log_probs.detach(), logits.grad.clone()))
    for eager, compiled in zip(*results):
        assert torch.isfinite(compiled).all()
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
