"""Tensor helpers shared by actors, critics, rollouts and the advantage code.

The log-prob and entropy helpers are the hot spots of an RL step: logits are
``[tokens, vocab]`` with vocabularies of 100k+, so a full-vocab ``log_softmax``
copy (and a float32 one for bf16 models) can cost more memory than the model.
``logprobs_from_logits`` therefore works row-chunk by row-chunk in float32 and
keeps only the per-row log-normaliser for the backward pass.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "logprobs_from_logits",
    "entropy_from_logits",
    "entropy_from_logits_with_chunking",
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "get_response_mask",
    "get_eos_mask",
    "compute_position_id_with_mask",
    "pad_sequence_to_length",
    "pad_2d_list_to_length",
    "postprocess_data",
    "tokenize_and_postprocess_data",
    "clip_by_value",
    "split_dict_tensor_into_batches",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_wsd_schedule_with_warmup",
    "gather_from_labels",
    "logprobs_from_logits_naive",
    "log_probs_from_logits_response",
    "log_probs_from_logits_response_rmpad",
    "log_probs_from_logits_all_rmpad",
    "remove_pad_token",
    "compute_grad_norm",
    "check_device_is_available",
]

# Float32 elements one chunk of logits may expand to inside the log-prob kernels (~256 MiB).
_CHUNK_ELEMENTS = 64 * 1024 * 1024


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half types are upcast to float32; float32/float64 are kept."""
    return torch.promote_types(dtype, torch.float32)


def _rows_per_chunk(vocab: int, chunk_size: int | None, elements: int | None = None) -> int:
    """``chunk_size`` checked, or as many rows as keep one chunk within ``elements`` (default ~256 MiB float32)."""
    if chunk_size is not None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive number of rows, got {chunk_size}")
        return chunk_size
    return max(1, (elements or _CHUNK_ELEMENTS) // max(vocab, 1))


def _row_blocks(logits: torch.Tensor, rows: int) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(first_row, block[r, V])`` covering ``logits`` flattened to rows, without a full copy.

    When the leading dims can be merged as a view (the usual case) blocks are views; otherwise
    (e.g. ``logits[:, :-1]``) blocks are whole slices of dim 0 reshaped one at a time, so at most
    one slice is copied at once.
    """
    vocab = logits.shape[-1]
    if logits.dim() == 1:
        logits = logits.unsqueeze(0)
    try:
        flat = logits.view(-1, vocab)
    except RuntimeError:
        flat = None
    if flat is not None:
        for start in range(0, flat.shape[0], rows):
            yield start, flat[start : start + rows]
        return
    rows_per_item = math.prod(logits.shape[1:-1])
    items = max(1, rows // max(rows_per_item, 1))
    for start in range(0, logits.shape[0], items):
        yield start * rows_per_item, logits[start : start + items].reshape(-1, vocab)


def _logprob_block(block: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of ``labels`` and the log-normaliser of one ``[rows, V]`` block."""
    block = block.to(dtype)
    lse = torch.logsumexp(block, dim=-1)
    return block.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse, lse


def _logprob_block_grad(
    block: torch.Tensor, labels: torch.Tensor, lse: torch.Tensor, grad_out: torch.Tensor
) -> torch.Tensor:
    """``d logp / d logits * grad_out`` of one block: ``g * (onehot(label) - softmax)``."""
    g = grad_out.to(lse.dtype).unsqueeze(-1)
    chunk_grad = (block.to(lse.dtype) - lse.unsqueeze(-1)).exp_().mul_(-g)
    return chunk_grad.scatter_add_(-1, labels.unsqueeze(-1), g).to(block.dtype)


class _ChunkedLogProbs(torch.autograd.Function):
    """``log_softmax(logits)[label]`` computed per row chunk as ``logit[label] - logsumexp(logits)``.

    Saves only the input logits (no copy) and one log-normaliser per row; the backward pass
    rebuilds ``softmax`` chunk by chunk: ``d/dlogits = g * (onehot(label) - softmax)``.
    """

    @staticmethod
    def forward(
        ctx, logits: torch.Tensor, labels: torch.Tensor, rows: int, kernels: tuple[Callable, Callable]
    ) -> torch.Tensor:
        dtype = _compute_dtype(logits.dtype)
        flat_labels = labels.reshape(-1)
        if kernels is not _EAGER_LOGPROB_KERNELS:
            # a copy of the (small) labels: a view would tie the compiled kernels to the size of the tensor it views
            flat_labels = flat_labels.clone()
        out = torch.empty(flat_labels.shape[0], dtype=dtype, device=logits.device)
        lse = torch.empty_like(out)
        block_logprobs = kernels[0]
        for start, block in _row_blocks(logits, rows):
            stop = start + block.shape[0]
            out[start:stop], lse[start:stop] = block_logprobs(block, flat_labels[start:stop], dtype)
        ctx.save_for_backward(logits, flat_labels, lse)
        ctx.rows = rows
        ctx.block_grad = kernels[1]
        return out.view(labels.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, flat_labels, lse = ctx.saved_tensors
        grad_out = grad_out.reshape(-1)
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        grad_flat = grad.view(-1, logits.shape[-1])
        for start, block in _row_blocks(logits, ctx.rows):
            stop = start + block.shape[0]
            grad_flat[start:stop] = ctx.block_grad(
                block, flat_labels[start:stop], lse[start:stop], grad_out[start:stop]
            )
        return grad, None, None, None


_EAGER_LOGPROB_KERNELS = (_logprob_block, _logprob_block_grad)


@functools.cache
def _compiled(kernel: Callable) -> Callable:
    """``kernel`` under ``torch.compile`` with dynamic shapes (every chunk length reuses one compiled kernel), fused
    into one pass over its block instead of one ``[rows, V]`` temporary per operation; one wrapper per process."""
    return torch.compile(kernel, dynamic=True)


def _kernels(eager: tuple[Callable, Callable], compiled: bool) -> tuple[Callable, Callable]:
    return (_compiled(eager[0]), _compiled(eager[1])) if compiled else eager


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    inplace_backward: bool = True,
    chunk_size: int | None = None,
    compiled: bool = False,
) -> torch.Tensor:
    """Log-probability of each label under ``softmax(logits)``.

    Args:
        logits: ``[..., V]`` scores in any float dtype (bf16/fp16 are computed in float32).
        labels: ``[...]`` integer token ids matching the leading dims of ``logits``.
        inplace_backward: accepted for verl compatibility (flash-attn's kernel flag); this kernel never
            writes into ``logits``, so other users of the same logits (e.g. entropy) stay correct.
        chunk_size: rows processed at once; default keeps one float32 chunk around 256 MiB.
        compiled: run each chunk through ``torch.compile``d kernels (``actor.use_torch_compile``).

    Returns:
        ``[...]`` log-probs in float32 (float64 for float64 logits), differentiable w.r.t. ``logits``.
    """
    if logits.dim() < 1 or labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"logprobs_from_logits: labels shape {tuple(labels.shape)} must equal logits shape without the "
            f"vocab dim, got logits {tuple(logits.shape)}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"logprobs_from_logits: logits must be floating point, got {logits.dtype}")
    if labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"logprobs_from_logits: labels must be integer token ids, got {labels.dtype}")
    rows = _rows_per_chunk(logits.shape[-1], chunk_size)
    return _ChunkedLogProbs.apply(logits, labels.long(), rows, _kernels(_EAGER_LOGPROB_KERNELS, compiled))


def _entropy_block_stats(block: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row max, ``lse`` and ``mu`` of one ``[rows, V]`` block (see :class:`_ChunkedEntropy`)."""
    block = block.to(dtype)
    row_max = block.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    xs = block - row_max
    lse = torch.logsumexp(xs, dim=-1)
    # in place from here (one [rows, V] buffer besides xs); masked (-inf) logits give 0 * -inf = nan, which is 0
    mu = (xs - lse.unsqueeze(-1)).exp_().mul_(xs).nan_to_num_(nan=0.0).sum(-1)
    return row_max.squeeze(-1), lse, mu


def _entropy_block_grad(
    block: torch.Tensor, row_max: torch.Tensor, lse: torch.Tensor, mu: torch.Tensor, grad_out: torch.Tensor
) -> torch.Tensor:
    """``dH/dx * grad_out`` of one block, recomputing ``p`` from the saved row statistics."""
    xs = block.to(lse.dtype) - row_max.unsqueeze(-1)
    probs = (xs - lse.unsqueeze(-1)).exp_()
    # p * (xs - mu), in place; at masked (-inf) logits p is 0 and the nan of 0 * -inf is 0
    grad = probs.mul_(xs.sub_(mu.unsqueeze(-1))).nan_to_num_(nan=0.0)
    return grad.mul_(-grad_out.unsqueeze(-1)).to(block.dtype)


_EAGER_ENTROPY_KERNELS = (_entropy_block_stats, _entropy_block_grad)


class _ChunkedEntropy(torch.autograd.Function):
    """Row-chunked entropy that saves three numbers per row instead of ``softmax`` copies.

    With ``xs = x - max(x)``, ``lse = logsumexp(xs)``, ``p = exp(xs - lse)`` and ``mu = sum(p * xs)``:
    ``H = lse - mu`` and ``dH/dx = -p * (xs - mu)``; the backward pass recomputes ``p`` chunk by chunk.
    Centring on the row max avoids the cancellation of ``lse - mu`` for large logits.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, rows: int, kernels: tuple[Callable, Callable]) -> torch.Tensor:
        dtype = _compute_dtype(logits.dtype)
        n_rows = math.prod(logits.shape[:-1])
        # row max, lse, mu: three tensors, not rows of one, so no kernel input is a view of a [3, n] base whose
        # leading 3 a compiled kernel could mistake for a row count
        row_max, lse, mu = (torch.empty(n_rows, dtype=dtype, device=logits.device) for _ in range(3))
        block_stats = kernels[0]
        for start, block in _row_blocks(logits, rows):
            stop = start + block.shape[0]
            row_max[start:stop], lse[start:stop], mu[start:stop] = block_stats(block, dtype)
        ctx.save_for_backward(logits, row_max, lse, mu)
        ctx.rows = rows
        ctx.block_grad = kernels[1]
        return (lse - mu).view(logits.shape[:-1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, row_max, lse, mu = ctx.saved_tensors
        grad_out = grad_out.reshape(-1).to(lse.dtype)
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        grad_flat = grad.view(-1, logits.shape[-1])
        for start, block in _row_blocks(logits, ctx.rows):
            stop = start + block.shape[0]
            grad_flat[start:stop] = ctx.block_grad(
                block, row_max[start:stop], lse[start:stop], mu[start:stop], grad_out[start:stop]
            )
        return grad, None, None


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = None, compiled: bool = False) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dim, differentiable.

    Stable for huge and ``-inf`` (masked) logits, float32 inside for half inputs, and computed in row
    chunks (``chunk_size`` rows, default ~256 MiB of float32) so no full-vocab probability copy is kept.
    ``compiled`` runs each chunk through ``torch.compile``d kernels (``actor.use_torch_compile``).
    """
    if logits.dim() < 1 or not logits.is_floating_point():
        raise TypeError(f"entropy_from_logits expects floating-point [..., V] logits, got {logits.dtype}")
    kernels = _kernels(_EAGER_ENTROPY_KERNELS, compiled)
    return _ChunkedEntropy.apply(logits, _rows_per_chunk(logits.shape[-1], chunk_size), kernels)


def entropy_from_logits_with_chunking(
    logits: torch.Tensor, chunk_size: int = 2048, compiled: bool = False
) -> torch.Tensor:
    """:func:`entropy_from_logits` on ``[T, V]`` logits with an explicit row chunk size."""
    if logits.dim() != 2:
        raise ValueError(f"entropy_from_logits_with_chunking expects [T, V] logits, got {tuple(logits.shape)}")
    return entropy_from_logits(logits, chunk_size=chunk_size, compiled=compiled)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | Sequence[int] | None = None) -> torch.Tensor:
    """Sum of ``values * mask``; masked-out entries contribute 0 even when they hold nan/inf."""
    if values.shape != mask.shape:
        raise ValueError(f"masked_sum: values shape {tuple(values.shape)} != mask shape {tuple(mask.shape)}")
    weighted = torch.where(mask.bool(), values * mask, torch.zeros((), dtype=values.dtype, device=values.device))
    return weighted.sum() if axis is None else weighted.sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | Sequence[int] | None = None) -> torch.Tensor:
    """Mean over entries where ``mask`` is set; an all-zero mask gives 0 rather than nan."""
    total = masked_sum(values, mask, axis)
    count = mask.sum() if axis is None else mask.sum(dim=axis)
    return total / count.clamp(min=1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over masked entries (all dims), Bessel-corrected when ``unbiased``."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = float(mask.sum().item())
        if count < 2:
            raise ValueError(
                f"masked_var(unbiased=True) needs at least 2 unmasked elements, the mask has {count:g}; "
                "pass unbiased=False or a larger mask"
            )
        variance = variance * (count / (count - 1))
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``values`` to unit variance (and zero mean if ``shift_mean``) using masked statistics."""
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def get_response_mask(
    response_id: torch.Tensor, eos_token: int | Sequence[int] = 2, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """1 for every response token up to and including the first EOS, 0 after it.

    ``eos_token`` may be one id or a list of ids (any of them ends the response).
    """
    if response_id.dim() != 2:
        raise ValueError(f"get_response_mask expects [batch, response_len] ids, got {tuple(response_id.shape)}")
    eos_ids = [eos_token] if isinstance(eos_token, int) else list(eos_token)
    if not eos_ids:
        raise ValueError("get_response_mask: eos_token is an empty list")
    is_eos = torch.isin(response_id, torch.tensor(eos_ids, device=response_id.device, dtype=response_id.dtype))
    is_eos = is_eos.to(torch.int64)
    eos_before = torch.cumsum(is_eos, dim=1) - is_eos
    return (eos_before == 0).to(dtype)


def get_eos_mask(
    response_id: torch.Tensor, eos_token: int | Sequence[int] = 2, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """Old name of :func:`get_response_mask`, kept for recipes written against it."""
    return get_response_mask(response_id, eos_token, dtype)


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on the first real token, so left padding doesn't shift positions."""
    return torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0, max=None)


def pad_sequence_to_length(
    tensors: torch.Tensor, max_seq_len: int, pad_token_id: int | float, left_pad: bool = False
) -> torch.Tensor:
    """Pad the last dim of ``tensors`` to ``max_seq_len``; tensors already that long are returned as is."""
    length = tensors.shape[-1]
    if length >= max_seq_len:
        return tensors
    pad = (max_seq_len - length, 0) if left_pad else (0, max_seq_len - length)
    return F.pad(tensors, pad, value=pad_token_id)


def pad_2d_list_to_length(
    response: Sequence[Sequence[int]],
    pad_token_id: int,
    max_length: int | None = None,
    left_pad: bool = False,
) -> torch.Tensor:
    """Turn ragged token lists into a ``[N, L]`` tensor padded with ``pad_token_id``.

    ``L`` is ``max_length`` when given (must fit the longest row), else the longest row.
    """
    longest = max((len(row) for row in response), default=0)
    target = longest if max_length is None else max_length
    if target < longest:
        row = max(range(len(response)), key=lambda i: len(response[i]))
        raise ValueError(f"pad_2d_list_to_length: row {row} has {longest} tokens, more than max_length={max_length}")
    padded = []
    for row in response:
        fill = [pad_token_id] * (target - len(row))
        padded.append(fill + list(row) if left_pad else list(row) + fill)
    return torch.tensor(padded, dtype=torch.long).reshape(len(response), target)


def postprocess_data(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_length: int,
    pad_token_id: int,
    left_pad: bool = True,
    truncation: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad or truncate ``[B, S]`` ids and mask to exactly ``max_length``.

    ``truncation`` is one of ``left``, ``right``, ``middle`` (keep head and tail) or ``error``.
    """
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"postprocess_data expects matching [B, S] input_ids/attention_mask, got {tuple(input_ids.shape)} "
            f"and {tuple(attention_mask.shape)}"
        )
    length = input_ids.shape[-1]
    if length < max_length:
        input_ids = pad_sequence_to_length(input_ids, max_length, pad_token_id, left_pad=left_pad)
        attention_mask = pad_sequence_to_length(attention_mask, max_length, 0, left_pad=left_pad)
    elif length > max_length:
        if truncation == "left":
            input_ids, attention_mask = input_ids[:, -max_length:], attention_mask[:, -max_length:]
        elif truncation == "right":
            input_ids, attention_mask = input_ids[:, :max_length], attention_mask[:, :max_length]
        elif truncation == "middle":
            head = max_length // 2
            tail = max_length - head
            input_ids = torch.cat([input_ids[:, :head], input_ids[:, length - tail :]], dim=-1)
            attention_mask = torch.cat([attention_mask[:, :head], attention_mask[:, length - tail :]], dim=-1)
        elif truncation == "error":
            raise ValueError(f"sequence length {length} is longer than max_length={max_length} (truncation='error')")
        else:
            raise ValueError(f"truncation must be one of left/right/middle/error, got {truncation!r}")
    return input_ids, attention_mask


def tokenize_and_postprocess_data(
    prompt: str,
    tokenizer,
    max_length: int,
    pad_token_id: int,
    left_pad: bool = True,
    truncation: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize one already-templated prompt (no extra special tokens) into ``[1, max_length]`` ids and mask."""
    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    return postprocess_data(
        encoded["input_ids"], encoded["attention_mask"], max_length, pad_token_id, left_pad, truncation
    )


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor | float, tensor_max: torch.Tensor | float) -> torch.Tensor:
    """Element-wise clamp where the bounds may be tensors (e.g. ``old_values -/+ clip``) or numbers."""
    lo = torch.as_tensor(tensor_min, dtype=x.dtype, device=x.device)
    hi = torch.as_tensor(tensor_max, dtype=x.dtype, device=x.device)
    return torch.maximum(torch.minimum(x, hi), lo)


def split_dict_tensor_into_batches(tensors, batch_size: int) -> list:
    """Split a TensorDict along dim 0 into batches of ``batch_size`` (last one may be smaller)."""
    if batch_size <= 0:
        raise ValueError(f"split_dict_tensor_into_batches: batch_size must be positive, got {batch_size}")
    return list(tensors.split(batch_size))


def get_constant_schedule_with_warmup(
    optimizer: torch.optim.Optimizer, num_warmup_steps: int, last_epoch: int = -1
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 to the base lr over ``num_warmup_steps``, then constant."""

    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch)


def get_cosine_schedule_with_warmup(
    optimizer: torch.optim.Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then cosine decay from the base lr to ``min_lr_ratio * base lr``.

    ``num_cycles=0.5`` is half a cosine wave (one monotone decay) over the post-warm-up steps.
    """
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")

    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress))
        cosine = max(0.0, cosine)
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch)


def get_wsd_schedule_with_warmup(
    optimizer: torch.optim.Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    stable_ratio: float = 0.9,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Warm-up, stable, decay: linear warm-up, then the base lr for ``stable_ratio`` of the remaining steps, then
    cosine decay to ``min_lr_ratio * base lr``, which is held after ``num_training_steps``."""
    remaining = max(0, num_training_steps - num_warmup_steps)
    stable_end = num_warmup_steps + int(remaining * stable_ratio)
    decay_steps = num_training_steps - stable_end

    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        if step < stable_end:
            return 1.0
        if step >= num_training_steps:
            return min_lr_ratio
        progress = float(step - stable_end) / float(max(1, decay_steps))
        cosine = max(0.0, 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress)))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch)


def gather_from_labels(data: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """``data[..., label]`` per position: ``[..., V]`` and integer ``[...]`` give ``[...]``."""
    return torch.gather(data, -1, label.unsqueeze(-1)).squeeze(-1)


def logprobs_from_logits_naive(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Reference log-probs through a full ``log_softmax`` (one ``[..., V]`` copy; :func:`logprobs_from_logits`
    gives the same values in bounded memory)."""
    return gather_from_labels(F.log_softmax(logits, dim=-1), labels)


def log_probs_from_logits_response(input_ids: torch.Tensor, logits: torch.Tensor, response_length: int) -> torch.Tensor:
    """Log-probs of the last ``response_length`` tokens of ``input_ids [B, S]`` under ``logits [B, S, V]``
    (the logits at position t score token t + 1)."""
    return logprobs_from_logits(logits[:, -response_length - 1 : -1], input_ids[:, -response_length:])


def _rmpad_response_log_probs(
    input_ids_rmpad: torch.Tensor,
    logits_rmpad: torch.Tensor,
    indices: torch.Tensor,
    batch_size: int,
    seqlen: int,
    response_length: int,
) -> torch.Tensor:
    from verl.utils.padding import pad_input

    next_tokens = torch.roll(input_ids_rmpad, shifts=-1, dims=0)
    packed = logprobs_from_logits(logits_rmpad, next_tokens)
    full = pad_input(packed.unsqueeze(-1), indices, batch_size, seqlen).squeeze(-1)
    return full[:, -response_length - 1 : -1]


def log_probs_from_logits_response_rmpad(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_rmpad: torch.Tensor, response_length: int
) -> torch.Tensor:
    """:func:`log_probs_from_logits_response` for a packed forward: ``logits_rmpad [T, V]`` are the logits of the
    real tokens of ``input_ids [B, S]`` (``attention_mask`` marks them)."""
    from verl.utils.padding import unpad_input

    batch_size, seqlen = input_ids.shape
    tokens, indices, _, _ = unpad_input(input_ids.unsqueeze(-1), attention_mask)
    return _rmpad_response_log_probs(tokens.squeeze(-1), logits_rmpad, indices, batch_size, seqlen, response_length)


def log_probs_from_logits_all_rmpad(
    input_ids_rmpad: torch.Tensor,
    logits_rmpad: torch.Tensor,
    indices: torch.Tensor,
    batch_size: int,
    seqlen: int,
    response_length: int,
) -> torch.Tensor:
    """Like :func:`log_probs_from_logits_response_rmpad` for ids already packed as ``[1, T]`` with their
    ``indices`` in the ``batch_size x seqlen`` grid."""
    return _rmpad_response_log_probs(
        input_ids_rmpad.reshape(-1), logits_rmpad, indices, batch_size, seqlen, response_length
    )


def remove_pad_token(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Token lists of left-padded rows: each row's last ``attention_mask.sum()`` ids."""
    rows = []
    for ids, mask in zip(input_ids, attention_mask, strict=True):
        kept = int(mask.sum().item())
        rows.append(ids[ids.shape[0] - kept :].tolist())
    return rows


def compute_grad_norm(model: torch.nn.Module) -> float:
    """Sum of squared gradient entries over ``model``'s parameters (verl's definition: not square-rooted)."""
    total = 0.0
    for parameter in model.parameters():
        if parameter.grad is not None:
            total += float(torch.sum(torch.square(parameter.grad.detach())).item())
    return total


@contextlib.contextmanager
def check_device_is_available() -> Iterator[None]:
    """Enter only when this process's device (:func:`verl.utils.device.get_device_name`) is usable; verl wraps
    imports that need an initialised accelerator in it. On a CPU-only process the device is the CPU, always usable."""
    from verl.utils.device import get_device_name, get_torch_device

    if not get_torch_device().is_available():
        raise RuntimeError(f"device {get_device_name()} must be initialized before importing this module")
    yield
