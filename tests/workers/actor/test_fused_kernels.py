"""model.use_fused_kernels: the actor's head computes log-probs and entropy itself, with the results of the
unfused path, in both layouts, for log-prob passes and updates; unsuitable models are refused by key."""

from __future__ import annotations

import copy

import pytest
import torch
from _actor_batches import response_micro_batch
from tensordict import TensorDict
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

from verl.protocol import DataProto
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.actor.fused_head import check_fused_head, fused_lm_head
from verl.workers.config.actor import FSDPActorConfig

PROMPT_LEN, RESPONSE_LEN, ROWS = 4, 5, 4


class LogitRows(TorchDispatchMode):
    """The most rows of logits (new tensors whose last dim is the vocabulary) any op produced while active; views,
    such as the transposed head weight, hold no memory of their own and are not counted."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab, self.most = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in [] if func.is_view else out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= 2 and tensor.shape[-1] == self.vocab:
                self.most = max(self.most, tensor.shape[:-1].numel())
        return out


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()


def micro_batch(vocab_size: int) -> TensorDict:
    return response_micro_batch(vocab_size, ROWS, PROMPT_LEN, RESPONSE_LEN)


def make_actor(model, fused: bool, remove_padding: bool = False, **config) -> DataParallelPPOActor:
    config = FSDPActorConfig(
        ppo_mini_batch_size=ROWS,
        ppo_micro_batch_size_per_gpu=2,
        use_fused_kernels=fused,
        use_remove_padding=remove_padding,
        **config,
    )
    return DataParallelPPOActor(config, model)


def forward_and_grads(base_model, fused: bool, remove_padding: bool, entropy_grad: bool):
    model = copy.deepcopy(base_model)
    actor = make_actor(model, fused, remove_padding)
    micro = micro_batch(model.config.vocab_size)
    with LogitRows(model.config.vocab_size) as seen:
        log_probs, entropy = actor._forward_responses(
            micro, temperature=0.7, calculate_entropy=True, entropy_grad=entropy_grad
        )
    (log_probs.sum() - 0.3 * entropy.sum()).backward() if entropy_grad else log_probs.sum().backward()
    return log_probs.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()], seen.most


@pytest.mark.parametrize("remove_padding", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_fused_head_gives_the_unfused_values_and_gradients(base_model, remove_padding, entropy_grad, monkeypatch):
    import verl.utils.fused_linear_logprob as kernel

    monkeypatch.setattr(kernel, "_CHUNK_ELEMENTS", 3 * base_model.config.vocab_size)  # 3 rows of logits a chunk
    plain = forward_and_grads(base_model, False, remove_padding, entropy_grad)
    fused = forward_and_grads(base_model, True, remove_padding, entropy_grad)
    assert plain[3] >= ROWS * RESPONSE_LEN - 2 and fused[3] == 3, "the fused path holds one chunk of logits"
    torch.testing.assert_close(fused[0], plain[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused[1], plain[1], atol=1e-5, rtol=1e-5)
    assert any(g.abs().max() > 0 for g in plain[2])
    for a, b in zip(fused[2], plain[2]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def ppo_batch(vocab_size: int) -> DataProto:
    micro = micro_batch(vocab_size)
    gen = torch.Generator().manual_seed(3)
    response_mask = micro["attention_mask"][:, PROMPT_LEN:]
    tensors = {key: micro[key] for key in micro.keys()}
    tensors.update(response_mask=response_mask, advantages=torch.randn(ROWS, RESPONSE_LEN, generator=gen))
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0, "micro_batch_size": 2})


def test_log_prob_pass_and_update_follow_the_unfused_path(base_model):
    results = {}
    for fused in (False, True):
        model = copy.deepcopy(base_model)
        actor = DataParallelPPOActor(
            FSDPActorConfig(
                ppo_mini_batch_size=ROWS, ppo_micro_batch_size_per_gpu=2, entropy_coeff=0.01, use_fused_kernels=fused
            ),
            model,
            torch.optim.SGD(model.parameters(), lr=1.0),  # SGD: Adam would magnify rounding in tiny grads
        )
        data = ppo_batch(model.config.vocab_size)
        old, entropy = actor.compute_log_prob(data, calculate_entropy=True)
        data.batch["old_log_probs"] = old
        metrics = actor.update_policy(data)
        results[fused] = old, entropy, metrics, [p.detach().clone() for p in model.parameters()]
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[True][1], results[False][1], atol=1e-5, rtol=1e-5)
    for key in ("actor/pg_loss", "actor/entropy"):
        assert results[True][2][key] == pytest.approx(results[False][2][key], abs=1e-5)
    moved = max((a - b).abs().max().item() for a, b in zip(results[False][3], base_model.parameters()))
    assert moved > 1e-4
    for a, b in zip(results[True][3], results[False][3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_the_head_is_restored_even_when_the_forward_raises(base_model):
    model = copy.deepcopy(base_model)
    head = model.get_output_embeddings()
    labels = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="the head received 5 positions for 6 labels"):
        with fused_lm_head(check_fused_head(model), labels, 1.0):
            model(input_ids=torch.ones(1, 7, dtype=torch.long), logits_to_keep=5)
    assert "forward" not in head.__dict__
    assert model(input_ids=torch.ones(1, 3, dtype=torch.long)).logits.shape[-1] == model.config.vocab_size


class NoKeep(torch.nn.Module):
    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)


@pytest.mark.parametrize("breakage", ["softcapping", "logit_scale", "head", "no_logits_to_keep"])
def test_models_the_fused_head_would_score_wrongly_are_refused_by_key(base_model, breakage):
    model = copy.deepcopy(base_model)
    if breakage == "softcapping":
        model.config.final_logit_softcapping = 30.0
        match = r"applies final_logit_softcapping=30.0 to its logits"
    elif breakage == "logit_scale":
        model.config.logit_scale = 0.5
        match = r"applies logit_scale=0.5"
    elif breakage == "head":
        model.set_output_embeddings(torch.nn.Sequential(model.get_output_embeddings()))
        match = r"output head to be a torch.nn.Linear; LlamaForCausalLM has Sequential"
    else:
        model = NoKeep(model)
        match = r"forward takes logits_to_keep; NoKeep does not"
    with pytest.raises(ValueError, match=r"model.use_fused_kernels=true.*" + match):
        make_actor(model, fused=True)
    make_actor(model, fused=False)  # the unfused path takes any of them
    if breakage != "no_logits_to_keep":
        with pytest.raises(ValueError, match=match):
            check_fused_head(model, key="model.use_fused_kernels")
