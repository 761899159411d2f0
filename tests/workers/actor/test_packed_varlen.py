"""The actor's packed forward with varlen attention (the GPU path, here through its CPU reference) against the padded
forward: log-probs, entropy and a whole update, with and without activation checkpointing."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.protocol import DataProto
from verl.utils import varlen_attention as va
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.config.actor import ActorConfig

PROMPT, RESPONSE = 6, 7


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa").float()


@pytest.fixture
def varlen_calls(monkeypatch):
    """Force the varlen path on CPU and count the packed attention calls that reach the reference kernel."""
    monkeypatch.setenv(va.PACKED_ATTENTION_ENV, "varlen")
    calls = []
    reference = va._reference_varlen

    def counting(query, key, value, cu_seqlens, scale):
        calls.append(len(cu_seqlens) - 1)
        return reference(query, key, value, cu_seqlens, scale)

    monkeypatch.setattr(va, "_reference_varlen", counting)
    return calls


def make_batch(vocab_size: int, n: int = 6) -> DataProto:
    """Left-padded prompts, right-padded responses of varied lengths."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.zeros(n, PROMPT + RESPONSE, dtype=torch.long)
    for i in range(n):
        p = int(torch.randint(1, PROMPT + 1, (1,), generator=gen))
        r = RESPONSE if i == 0 else int(torch.randint(1, RESPONSE + 1, (1,), generator=gen))
        mask[i, PROMPT - p : PROMPT + r] = 1
    input_ids = torch.randint(1, vocab_size, mask.shape, generator=gen) * mask
    response_mask = mask[:, PROMPT:]
    tensors = {
        "responses": input_ids[:, PROMPT:],
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "response_mask": response_mask,
        "advantages": torch.randn(n, RESPONSE, generator=gen) * response_mask,
        "old_log_probs": -torch.rand(n, RESPONSE, generator=gen) * response_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0, "micro_batch_size": 3})


def make_actor(model, remove_padding: bool, optimizer=None, **overrides) -> DataParallelPPOActor:
    fields = {
        "ppo_mini_batch_size": 6,
        "ppo_micro_batch_size_per_gpu": 3,
        "ppo_epochs": 1,
        "grad_clip": 1e6,
        "entropy_coeff": 0.01,
        "use_remove_padding": remove_padding,
    }
    fields.update(overrides)
    return DataParallelPPOActor(ActorConfig(**fields), model, optimizer)


@pytest.mark.parametrize("meta", [{"micro_batch_size": 3}, {"use_dynamic_bsz": True, "max_token_len": 30}])
def test_packed_varlen_log_probs_equal_the_padded_forward(base_model, varlen_calls, meta):
    model = copy.deepcopy(base_model)
    data = make_batch(model.config.vocab_size)
    data.meta_info.update(meta)
    lp_pad, ent_pad = make_actor(model, False).compute_log_prob(data, calculate_entropy=True)
    assert not varlen_calls
    lp_var, ent_var = make_actor(model, True).compute_log_prob(data, calculate_entropy=True)
    # every layer's attention of every micro-batch went through the varlen kernel, one sequence per row
    assert varlen_calls and set(varlen_calls) <= {1, 2, 3, 4, 5, 6}
    assert model.config._attn_implementation == va.VARLEN_ATTENTION
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(lp_var[mask], lp_pad[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(ent_var[mask], ent_pad[mask], atol=1e-5, rtol=0)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_varlen_update_equals_the_padded_update(base_model, varlen_calls, checkpointing):
    """A whole PPO step; with activation checkpointing the backward re-runs each layer's attention after the packed
    call returned, which must take the varlen path again."""
    flat = []
    for remove_padding in (False, True):
        model = copy.deepcopy(base_model)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        actor = make_actor(model, remove_padding, torch.optim.SGD(model.parameters(), lr=1.0))
        calls_before = len(varlen_calls)
        actor.update_policy(make_batch(model.config.vocab_size))
        flat.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        if remove_padding:
            forwards = 2 * model.config.num_hidden_layers  # two micro-batches
            assert len(varlen_calls) - calls_before == forwards * (2 if checkpointing else 1)
    assert not torch.equal(flat[0], torch.cat([p.detach().flatten() for p in base_model.parameters()]))
    torch.testing.assert_close(flat[0], flat[1], atol=2e-5, rtol=0)


def test_on_cpu_the_default_keeps_the_block_mask_path(base_model, monkeypatch):
    monkeypatch.delenv(va.PACKED_ATTENTION_ENV, raising=False)
    model = copy.deepcopy(base_model)
    make_actor(model, True).compute_log_prob(make_batch(model.config.vocab_size))
    assert model.config._attn_implementation == "sdpa"
