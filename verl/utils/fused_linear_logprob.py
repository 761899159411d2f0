"""Log-probs and entropy straight from hidden states: the LM head and the softmax fused, chunk by chunk.

The usual path materialises ``logits = hidden @ W.T`` for every scored token, ``[tokens, vocab]``: 4096 tokens of a
152k vocabulary are 2.5 GB in float32 before the log-softmax touches them, and autograd keeps them for backward.
Here the head runs on ``chunk_size`` rows at a time; forward keeps three float32 numbers per row (row max,
log-normaliser, mean logit under ``softmax``) and backward recomputes each chunk's logits (one more matmul) to
form the gradients of the hidden states and of ``W``. Peak memory is one chunk of logits instead of all of them.

With ``y = (hidden @ W.T + b) / temperature``, ``xs = y - max(y)``, ``lse = logsumexp(xs)``, ``p = exp(xs - lse)``
and ``mu = sum(p * xs)``: ``log p(label) = xs[label] - lse``, ``H = lse - mu``, and
``dL/dy = g_logp * (onehot(label) - p) - g_H * p * (xs - mu)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from verl.utils.torch_functional import _rows_per_chunk

__all__ = ["linear_logprobs_and_entropy"]

# Float32 elements of one chunk of logits: a chunk holds two such buffers at once, in forward and backward. 64 MiB
# on a CPU. On an accelerator 512 MiB (~880 rows of a 152k vocabulary): the head's matmul needs that many rows to run
# at speed, and backward adds each chunk's [V, H] product into the head's float32 gradient, a pass over 4 x V x H
# bytes per chunk (at 110 rows a chunk that pass, not the matmuls, dominated the head's backward).
_CHUNK_ELEMENTS = 16 * 1024 * 1024
_CHUNK_ELEMENTS_ACCELERATOR = 128 * 1024 * 1024


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    """``[rows, V]`` float32 logits of one chunk, divided by the temperature as the unfused path does (a fresh
    tensor: callers work on it in place)."""
    logits = F.linear(hidden, weight, bias)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return logits if temperature == 1.0 else logits.div_(temperature)


def _softmax_of_shifted(xs: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    return (xs - lse.unsqueeze(-1)).exp_()


class _FusedLinearLogProbEntropy(torch.autograd.Function):
    """See the module docstring; inputs are flat: hidden ``[N, H]``, labels ``[N]``."""

    @staticmethod
    def forward(
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        temperature: float,
        rows: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        log_probs, row_max, lse, mu = (torch.empty(n, dtype=dtype, device=hidden.device) for _ in range(4))
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            xs = _chunk_logits(hidden[start:stop], weight, bias, temperature)
            chunk_max = xs.amax(dim=-1, keepdim=True)
            xs.sub_(chunk_max)
            chunk_lse = torch.logsumexp(xs, dim=-1)
            log_probs[start:stop] = xs.gather(-1, labels[start:stop].unsqueeze(-1)).squeeze(-1) - chunk_lse
            mu[start:stop] = _softmax_of_shifted(xs, chunk_lse).mul_(xs).sum(-1)
            row_max[start:stop], lse[start:stop] = chunk_max.squeeze(-1), chunk_lse
        entropy = lse - mu
        ctx.save_for_backward(hidden, weight, bias, labels, row_max, lse, mu)
        ctx.temperature, ctx.rows = temperature, rows
        ctx.set_materialize_grads(False)  # an output nobody differentiates arrives as None: its term is skipped
        return log_probs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        hidden, weight, bias, labels, row_max, lse, mu = ctx.saved_tensors
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None, None
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        # the head's gradient sums over every chunk: accumulate it in float32 whatever the model's dtype
        acc = torch.promote_types(weight.dtype, torch.float32)
        grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_bias else None
        for start in range(0, hidden.shape[0], ctx.rows):
            stop = min(start + ctx.rows, hidden.shape[0])
            chunk = hidden[start:stop]
            xs = _chunk_logits(chunk, weight, bias, ctx.temperature).sub_(row_max[start:stop].unsqueeze(-1))
            probs = _softmax_of_shifted(xs, lse[start:stop])
            g_logp = grad_logp[start:stop].to(xs.dtype).unsqueeze(-1) if grad_logp is not None else None
            if grad_entropy is not None:
                g_entropy = grad_entropy[start:stop].to(xs.dtype).unsqueeze(-1)
                inner = xs.sub_(mu[start:stop].unsqueeze(-1)).mul_(g_entropy)
                if g_logp is not None:
                    inner.add_(g_logp)
            else:
                inner = g_logp
            grad_y = probs.mul_(inner).neg_()
            if g_logp is not None:
                grad_y.scatter_add_(-1, labels[start:stop].unsqueeze(-1), g_logp)
            grad_logits = (grad_y if ctx.temperature == 1.0 else grad_y.div_(ctx.temperature)).to(weight.dtype)
            if grad_hidden is not None:
                grad_hidden[start:stop] = grad_logits @ weight
            if grad_weight is not None and grad_weight.dtype == weight.dtype:
                grad_weight.addmm_(grad_logits.t(), chunk.to(weight.dtype))  # no [V, H] temporary per chunk
            elif grad_weight is not None:
                grad_weight += grad_logits.t() @ chunk.to(weight.dtype)
            if grad_bias is not None:
                grad_bias += grad_logits.sum(0)
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None else None
        return grad_hidden, grad_weight, grad_bias, None, None, None


def linear_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each label and the entropy under ``softmax((hidden @ weight.T + bias) / temperature)``.

    Args:
        hidden: ``[..., H]`` hidden states (the LM head's input).
        weight: ``[V, H]`` LM-head weight; bias: ``[V]`` or None.
        labels: ``[...]`` token ids, the leading dims of ``hidden``.
        temperature: the logits are divided by it, as in the unfused path.
        chunk_size: rows per chunk; default keeps one float32 chunk of logits around 64 MiB on a CPU, 512 MiB on an
            accelerator.

    Returns:
        ``(log_probs, entropy)``, each ``[...]`` in float32 (float64 for float64 inputs), differentiable w.r.t.
        ``hidden``, ``weight`` and ``bias``; the ``[..., V]`` logits are never held whole.
    """
    if hidden.dim() < 1 or labels.shape != hidden.shape[:-1]:
        raise ValueError(
            f"linear_logprobs_and_entropy: labels shape {tuple(labels.shape)} must equal hidden shape "
            f"without the hidden dim, got hidden {tuple(hidden.shape)}"
        )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"linear_logprobs_and_entropy: weight must be [vocab, {hidden.shape[-1]}], got {tuple(weight.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"linear_logprobs_and_entropy: temperature must be > 0, got {temperature}")
    elements = _CHUNK_ELEMENTS if hidden.device.type == "cpu" else _CHUNK_ELEMENTS_ACCELERATOR
    rows = _rows_per_chunk(weight.shape[0], chunk_size, elements)
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    log_probs, entropy = _FusedLinearLogProbEntropy.apply(
        flat_hidden, weight, bias, labels.reshape(-1).long(), float(temperature), rows
    )
    return log_probs.view(labels.shape), entropy.view(labels.shape)
