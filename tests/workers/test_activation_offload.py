"""model.enable_activation_offload: tensors saved for backward wait in host memory; gradients are unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.workers.config import HFModelConfig
from verl.workers.fsdp.activation_offload import enable_activation_offload
from verl.workers.fsdp.model_loader import load_causal_lm


def _forward_memory_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[int, list[torch.Tensor]]:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loss = model(ids).logits.float().logsumexp(-1).mean()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before  # the graph's saved tensors, the logits and the loss
    loss.backward()
    return held, [p.grad.clone() for p in model.parameters()]


@pytest.mark.gpu
def test_saved_activations_leave_the_gpu_and_gradients_stay_the_same(tiny_model_dir):
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).cuda()
    ids = torch.randint(3, base.config.vocab_size, (16, 1024), device="cuda")
    plain_held, plain_grads = _forward_memory_and_grads(copy.deepcopy(base), ids)
    offloaded_held, offloaded_grads = _forward_memory_and_grads(enable_activation_offload(copy.deepcopy(base)), ids)
    assert offloaded_held < 0.5 * plain_held, (offloaded_held, plain_held)
    for a, b in zip(offloaded_grads, plain_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_loader_installs_it_for_trainable_models_only(tiny_model_dir):
    config = HFModelConfig(path=str(tiny_model_dir), enable_activation_offload=True)
    trainable = load_causal_lm(config, str(tiny_model_dir), torch.float32)
    frozen = load_causal_lm(config, str(tiny_model_dir), torch.float32, trainable=False)
    plain = load_causal_lm(HFModelConfig(path=str(tiny_model_dir)), str(tiny_model_dir), torch.float32)
    assert len(trainable._forward_pre_hooks) == len(plain._forward_pre_hooks) + 1
    assert len(frozen._forward_pre_hooks) == len(plain._forward_pre_hooks)
    # on a CPU nothing is moved: the same loss and gradients as without the switch
    ids = torch.randint(3, plain.config.vocab_size, (2, 12))
    for model in (trainable, plain):
        model(ids).logits.logsumexp(-1).mean().backward()
    for a, b in zip(trainable.parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
