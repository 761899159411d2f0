"""Varlen attention for packed forwards: the per-sequence reference against a block-diagonal mask, the adapter to
each torch release's ``varlen_attn`` keywords, and the sdpa delegation of a switched model."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from verl.utils import varlen_attention as va


def _block_causal_attention(q, k, v, cu_seqlens):
    """Independent reference: one SDPA call over the whole packed row with a block-diagonal causal mask."""
    total = q.shape[0]
    seq_id = torch.repeat_interleave(torch.arange(len(cu_seqlens) - 1), cu_seqlens[1:] - cu_seqlens[:-1])
    pos = torch.arange(total)
    mask = (seq_id[:, None] == seq_id[None, :]) & (pos[:, None] >= pos[None, :])
    groups = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=mask
    )
    return out[0].transpose(0, 1)


def _packed_qkv(lengths, heads=4, kv_heads=2, dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q, k, v = (torch.randn(total, h, dim, generator=gen, requires_grad=True) for h in (heads, kv_heads, kv_heads))
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return q, k, v, cu


def test_reference_varlen_equals_a_block_diagonal_mask_forward_and_backward():
    q, k, v, cu = _packed_qkv([3, 5, 1, 4])
    out = va.varlen_attention(q, k, v, cu, max_seqlen=5)
    expected = _block_causal_attention(q, k, v, cu)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_reference_varlen_takes_the_scale_and_skips_empty_sequences():
    q, k, v, cu = _packed_qkv([2, 3])
    cu_with_empty = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    scaled = va.varlen_attention(q, k, v, cu_with_empty, max_seqlen=3, scale=0.5)
    torch.testing.assert_close(scaled, _block_causal_attention(q * (0.5 * 8**0.5), k, v, cu))


def _fake_varlen(signature: str):
    """A stand-in for one torch release's varlen_attn: records its keywords, computes with the reference."""
    calls: list[dict] = []
    namespace: dict = {}
    exec(f"def fake({signature}):\n    calls.append(dict(locals()))\n    return 'out'", {"calls": calls}, namespace)
    fake = namespace["fake"]
    return fake, frozenset(inspect.signature(fake).parameters), calls


@pytest.mark.parametrize(
    "signature, expect",
    [
        # torch 2.10: is_causal, no scale, no grouped-query support
        ("q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None", {"is_causal": True}),
        # torch 2.11: window_size (-1, 0) means causal, scale taken
        (
            "q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)",
            {"window_size": (-1, 0), "scale": 0.25},
        ),
        # torch 2.12+: grouped queries without repeating the key/value heads
        (
            "q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1), "
            "enable_gqa=False, seqused_k=None, block_table=None, num_splits=None",
            {"window_size": (-1, 0), "scale": 0.25, "enable_gqa": True},
        ),
    ],
)
def test_torch_varlen_keywords_follow_the_installed_signature(signature, expect):
    fake, params, calls = _fake_varlen(signature)
    q, k, v, cu = _packed_qkv([2, 3], heads=4, kv_heads=2, dim=16)
    assert va._torch_varlen_call(fake, params, q, k, v, cu, 3, 0.25) == "out"
    (call,) = calls
    for name, value in expect.items():
        assert call[name] == value, name
    kv_heads = 2 if "enable_gqa" in params else 4
    assert call["k"].shape[1] == call["v"].shape[1] == kv_heads
    if "scale" not in params:  # folded into the query instead
        torch.testing.assert_close(call["q"], q * (0.25 * 16**0.5))
    assert (call["max_q"], call["max_k"]) == (3, 3) and call["cu_q"] is cu


def test_packed_attention_mode_reads_the_environment(monkeypatch):
    monkeypatch.delenv(va.PACKED_ATTENTION_ENV, raising=False)
    assert va.packed_attention_mode() == "auto"
    assert va.wants_varlen(torch.device("cpu")) is False  # CPU forwards keep transformers' mask unless asked
    monkeypatch.setenv(va.PACKED_ATTENTION_ENV, "varlen")
    assert va.wants_varlen(torch.device("cpu")) is True
    monkeypatch.setenv(va.PACKED_ATTENTION_ENV, "mask")
    assert va.wants_varlen(torch.device("cuda")) is False
    monkeypatch.setenv(va.PACKED_ATTENTION_ENV, "fast")
    with pytest.raises(ValueError, match="VERL_PACKED_ATTENTION='fast'"):
        va.packed_attention_mode()


def test_a_packed_call_whose_boundaries_never_reach_the_attention_is_an_error():
    q = torch.randn(1, 4, 5, 8)
    with va.packed_call(), pytest.raises(RuntimeError, match="without cu_seq_lens_q"):
        va.varlen_attention_forward(torch.nn.Module(), q, q, q, None)


def _tiny_qwen2(**overrides):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    fields = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=97,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    fields.update(overrides)
    return AutoModelForCausalLM.from_config(Qwen2Config(**fields)).eval()


def test_a_switched_model_computes_padded_and_packed_calls_like_sdpa():
    import copy

    model = _tiny_qwen2()
    plain = copy.deepcopy(model)
    assert va.enable_varlen_attention(model) and model.config._attn_implementation == va.VARLEN_ATTENTION
    assert va.enable_varlen_attention(model)  # once
    ids = torch.randint(1, 97, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: a padded call still gets sdpa's mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[mask.bool()],
            plain(input_ids=ids, attention_mask=mask, position_ids=positions).logits[mask.bool()],
        )
        # a packed call: the boundaries as keyword arguments, no mask; equals each sequence run alone
        cu = torch.tensor([0, 4, 11], dtype=torch.int32)
        packed_ids = torch.cat([ids[0, 3:], ids[1]])[None]
        packed_pos = torch.cat([torch.arange(4), torch.arange(7)])[None]
        with va.packed_call():
            packed = model(
                input_ids=packed_ids,
                position_ids=packed_pos,
                cu_seq_lens_q=cu,
                cu_seq_lens_k=cu,
                max_length_q=7,
                max_length_k=7,
            ).logits[0]
        torch.testing.assert_close(packed[:4], plain(input_ids=ids[:1, 3:]).logits[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(packed[4:], plain(input_ids=ids[1:]).logits[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [{"attn_implementation": "eager"}, {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}],
)
def test_models_the_varlen_path_cannot_serve_are_left_as_they_are(overrides):
    model = _tiny_qwen2(**overrides)
    before = model.config._attn_implementation
    assert va.enable_varlen_attention(model) is False
    assert model.config._attn_implementation == before


@pytest.mark.gpu
def test_the_cuda_kernel_matches_the_reference_in_bfloat16():
    q, k, v, cu = _packed_qkv([37, 64, 5, 90], heads=14, kv_heads=2, dim=64)
    low = [t.detach().cuda().bfloat16().requires_grad_() for t in (q, k, v)]
    high = [t.detach().cuda().requires_grad_() for t in (q, k, v)]
    cu = cu.cuda()
    assert va.varlen_kernel_name(torch.device("cuda")) != "reference"
    out = va.varlen_attention(*low, cu, max_seqlen=90)
    ref = va._reference_varlen(*high, cu, None)
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    weight = torch.randn_like(ref)
    (out.float() * weight).sum().backward()
    (ref * weight).sum().backward()
    for a, b in zip(low, high):
        torch.testing.assert_close(a.grad.float(), b.grad, atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
def test_on_cuda_packed_forwards_switch_to_varlen_by_default(monkeypatch):
    """The actor's packed forward on a GPU (no environment override) takes the varlen kernel and agrees with the
    padded forward."""
    from tensordict import TensorDict

    from verl.workers.actor.token_forward import forward_for_responses

    monkeypatch.delenv(va.PACKED_ATTENTION_ENV, raising=False)
    model = _tiny_qwen2(hidden_size=128, intermediate_size=128).cuda().bfloat16()  # head_dim 32: a flash kernel size
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, :4] = 0
    mask[1, -3:] = 0
    micro = TensorDict(
        {
            "input_ids": torch.randint(1, 97, (3, 12)) * mask,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        },
        batch_size=[3],
    ).cuda()
    outputs = {}
    with torch.no_grad():
        for remove_padding in (False, True):
            flat, slots = forward_for_responses(
                model, micro["input_ids"], micro["attention_mask"], micro["position_ids"], 5, remove_padding
            )
            outputs[remove_padding] = slots.take(flat).float()
    assert model.config._attn_implementation == va.VARLEN_ATTENTION
    real = mask[:, -6:-1].bool().cuda()  # the response slots whose scoring position is a real token
    torch.testing.assert_close(outputs[True][real], outputs[False][real], atol=5e-2, rtol=5e-2)
