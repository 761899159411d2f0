"""linear_logprobs_and_entropy: the LM head and the softmax fused chunk by chunk, against explicit logits."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from verl.utils.fused_linear_logprob import linear_logprobs_and_entropy

N, H, V = 23, 12, 40


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements any op produced while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


def inputs(dtype: torch.dtype = torch.float64, bias: bool = True, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.randn(V, H, generator=gen, dtype=dtype).requires_grad_()
    b = torch.randn(V, generator=gen, dtype=dtype).requires_grad_() if bias else None
    labels = torch.randint(0, V, (N,), generator=gen)
    return hidden, weight, b, labels


def explicit(hidden, weight, bias, labels, temperature):
    """Reference: the whole [N, V] logits, log_softmax, gather."""
    logits = torch.nn.functional.linear(hidden, weight, bias)
    log_softmax = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, -1)
    return log_softmax.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(log_softmax.exp() * log_softmax).sum(-1)


@pytest.mark.parametrize("chunk_size", [1, 5, N, None])
@pytest.mark.parametrize("bias", [True, False])
def test_values_and_gradients_equal_the_explicit_softmax(chunk_size, bias):
    hidden, weight, b, labels = inputs(bias=bias)
    params = [t for t in (hidden, weight, b) if t is not None]
    gen = torch.Generator().manual_seed(1)
    g_logp, g_entropy = (
        torch.randn(N, generator=gen, dtype=torch.float64),
        torch.randn(N, generator=gen, dtype=torch.float64),
    )
    log_probs, entropy = linear_logprobs_and_entropy(
        hidden, weight, labels, bias=b, temperature=0.7, chunk_size=chunk_size
    )
    want_logp, want_entropy = explicit(hidden, weight, b, labels, 0.7)
    torch.testing.assert_close(log_probs, want_logp)
    torch.testing.assert_close(entropy, want_entropy)
    grads = torch.autograd.grad((log_probs * g_logp).sum() + (entropy * g_entropy).sum(), params)
    want = torch.autograd.grad((want_logp * g_logp).sum() + (want_entropy * g_entropy).sum(), params)
    for got, expected in zip(grads, want):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("output", ["log_probs", "entropy"])
def test_one_output_alone_has_its_own_gradient(output):
    hidden, weight, b, labels = inputs()
    got = dict(
        zip(["log_probs", "entropy"], linear_logprobs_and_entropy(hidden, weight, labels, bias=b, chunk_size=4))
    )[output]
    want = dict(zip(["log_probs", "entropy"], explicit(hidden, weight, b, labels, 1.0)))[output]
    grads = torch.autograd.grad(got.sum(), (hidden, weight, b))
    for got_grad, expected in zip(grads, torch.autograd.grad(want.sum(), (hidden, weight, b))):
        torch.testing.assert_close(got_grad, expected)


def test_gradcheck_over_batched_leading_dims():
    hidden, weight, _, _ = inputs(bias=False)
    hidden = hidden.detach()[:12].reshape(3, 4, H).requires_grad_()
    labels = torch.randint(0, V, (3, 4), generator=torch.Generator().manual_seed(2))
    assert torch.autograd.gradcheck(
        lambda h, w: linear_logprobs_and_entropy(h, w, labels, chunk_size=5), (hidden, weight)
    )


def test_half_precision_inputs_give_float32_results_close_to_float32():
    hidden, weight, b, labels = inputs(dtype=torch.float32)
    log_probs, entropy = linear_logprobs_and_entropy(
        hidden.bfloat16(), weight.bfloat16(), labels, bias=b.bfloat16(), chunk_size=7
    )
    want_logp, want_entropy = linear_logprobs_and_entropy(hidden, weight, labels, bias=b)
    assert log_probs.dtype == entropy.dtype == torch.float32
    torch.testing.assert_close(log_probs, want_logp, atol=0.3, rtol=0.05)
    torch.testing.assert_close(entropy, want_entropy, atol=0.1, rtol=0.05)
    h16, w16 = hidden.detach().bfloat16().requires_grad_(), weight.detach().bfloat16().requires_grad_()
    logp16, _ = linear_logprobs_and_entropy(h16, w16, labels, chunk_size=7)
    logp16.sum().backward()
    assert h16.grad.dtype == w16.grad.dtype == torch.bfloat16
    assert torch.isfinite(w16.grad.float()).all() and w16.grad.abs().max() > 0


def test_no_op_holds_more_than_one_chunk_of_logits():
    hidden, weight, b, labels = inputs(dtype=torch.float32)
    with LargestTensor() as fused:
        log_probs, entropy = linear_logprobs_and_entropy(hidden, weight, labels, bias=b, chunk_size=4)
        (log_probs.sum() + entropy.sum()).backward()
    assert fused.largest <= max(4 * V, V * H), fused.largest
    with LargestTensor() as unfused:
        explicit(hidden, weight, b, labels, 1.0)
    assert unfused.largest == N * V  # the measurement sees whole logits where they exist


def test_bad_inputs_name_the_argument():
    hidden, weight, b, labels = inputs()
    with pytest.raises(ValueError, match="labels shape"):
        linear_logprobs_and_entropy(hidden, weight, labels[:-1])
    with pytest.raises(ValueError, match=r"weight must be \[vocab, 12\]"):
        linear_logprobs_and_entropy(hidden, weight[:, :5], labels)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        linear_logprobs_and_entropy(hidden, weight, labels, temperature=0.0)
    with pytest.raises(ValueError, match="chunk_size must be a positive"):
        linear_logprobs_and_entropy(hidden, weight, labels, chunk_size=0)


@pytest.mark.gpu
def test_bfloat16_on_cuda_follows_the_float32_logits():
    hidden, weight, _, labels = inputs(dtype=torch.float32)
    hidden, weight, labels = hidden.detach().cuda(), weight.detach().cuda(), labels.cuda()
    h16, w16 = hidden.bfloat16().requires_grad_(), weight.bfloat16().requires_grad_()
    log_probs, entropy = linear_logprobs_and_entropy(h16, w16, labels, chunk_size=4)
    want_logp, want_entropy = explicit(h16.float(), w16.float(), None, labels, 1.0)
    torch.testing.assert_close(log_probs, want_logp, atol=0.3, rtol=0.05)
    torch.testing.assert_close(entropy, want_entropy, atol=0.1, rtol=0.05)
    (log_probs.sum() + entropy.sum()).backward()
    assert w16.grad.dtype == torch.bfloat16 and torch.isfinite(w16.grad.float()).all()
