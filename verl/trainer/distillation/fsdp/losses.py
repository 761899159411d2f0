"""Top-k forward-KL distillation inside the FSDP engine's logits processor (the student's full logits are only
available there, one micro-batch at a time).

Per token, with the teacher's top-k tokens ``T`` and log-probs ``log p``, and the student's log-probs ``log q`` of the
same tokens: ``KL = sum_{t in T} p_t (log p_t - log q_t)``. The student's log-probs come from one ``log_softmax``
over the vocabulary, or, with ``use_chunked_topk``, from ``logit - logsumexp(logits)`` computed in chunks of tokens so
the ``[tokens, vocab]`` buffer is never materialised (long contexts). This build has no sequence parallelism, so the
teacher's tensors are used whole.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from verl.trainer.ppo._util import as_distillation_loss_config

__all__ = ["chunked_topk_log_probs", "compute_forward_kl_topk", "kl_divergence"]


def chunked_topk_log_probs(logits: torch.Tensor, topk_ids: torch.Tensor, chunk_size: int = 4096) -> torch.Tensor:
    """``log_softmax(logits).gather(-1, topk_ids)`` for ``[B, T, V]`` logits, ``chunk_size`` tokens at a time (fp32
    normaliser); same dtype as ``logits``."""
    batch, length, vocab = logits.shape
    k = topk_ids.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    flat_ids = topk_ids.reshape(-1, k)
    out = torch.empty(flat_ids.shape, dtype=logits.dtype, device=logits.device)
    for start in range(0, flat_logits.shape[0], chunk_size):
        chunk = flat_logits[start : start + chunk_size].float()
        normaliser = torch.logsumexp(chunk, dim=-1, keepdim=True)
        out[start : start + chunk_size] = (chunk.gather(-1, flat_ids[start : start + chunk_size]) - normaliser).to(
            logits.dtype
        )
    return out.reshape(batch, length, k)


def kl_divergence(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """``sum p (log p - log q)`` over the last dimension, in fp32."""
    log_p, log_q = log_p.float(), log_q.float()
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """A nested ``[B, (T), k]`` tensor as the engine's packed ``[1, total_tokens, k]`` layout."""
    return tensor.values().unsqueeze(0) if tensor.is_nested else tensor


def compute_forward_kl_topk(
    student_logits: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    config: Any,
    data_format: str = "thd",
) -> dict[str, torch.Tensor]:
    """Per-token top-k KL and diagnostics for ``student_logits`` ``[bsz, seqlen, vocab]``.

    The teacher tensors are ``[bsz, seqlen, k]`` or nested (packed to ``[1, total, k]`` to match the engine's
    ``thd`` layout). ``config`` is the distillation config or its ``distillation_loss`` (``log_prob_min_clamp``,
    ``use_chunked_topk``, ``chunked_topk_chunk_size``). Returns ``distillation_losses``, ``student_mass`` and
    ``teacher_mass`` (the top-k's probability under each model), ``overlap_count`` (teacher top-k tokens also in the
    student's top-k) and ``overlap_token_advantage`` (mean ``-p (log p - log q)`` over those tokens), each
    ``[bsz, seqlen]``.
    """
    loss_config = as_distillation_loss_config(config)
    teacher_log_probs = _flat(teacher_topk_log_probs)
    teacher_ids = _flat(teacher_topk_ids).long()
    if teacher_log_probs.shape[:2] != student_logits.shape[:2] or teacher_ids.shape != teacher_log_probs.shape:
        raise ValueError(
            f"forward_kl_topk: student logits {tuple(student_logits.shape)} do not line up with teacher "
            f"log-probs {tuple(teacher_log_probs.shape)} / ids {tuple(teacher_ids.shape)}"
        )
    k = teacher_ids.shape[-1]
    if loss_config.use_chunked_topk:
        student_topk_ids = torch.topk(student_logits, k=k, dim=-1).indices
        student_log_probs = chunked_topk_log_probs(student_logits, teacher_ids, loss_config.chunked_topk_chunk_size)
    else:
        log_softmax = F.log_softmax(student_logits, dim=-1)
        student_topk_ids = torch.topk(log_softmax, k=k, dim=-1).indices
        student_log_probs = log_softmax.gather(-1, teacher_ids)
    student_mass = student_log_probs.exp().sum(-1)
    teacher_mass = teacher_log_probs.exp().sum(-1)
    floor = loss_config.log_prob_min_clamp
    if floor is not None:
        student_log_probs = student_log_probs.clamp_min(float(floor))
        teacher_log_probs = teacher_log_probs.clamp_min(float(floor))
    losses = kl_divergence(log_q=student_log_probs, log_p=teacher_log_probs)
    overlap = (teacher_ids.unsqueeze(-1) == student_topk_ids.unsqueeze(-2)).any(-1)
    overlap_count = overlap.sum(-1)
    token_kl = teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)
    advantage = (-token_kl * overlap).sum(-1) / overlap_count.clamp_min(1)
    return {
        "distillation_losses": losses,
        "student_mass": student_mass,
        "teacher_mass": teacher_mass,
        "overlap_count": overlap_count,
        "overlap_token_advantage": torch.where(overlap_count > 0, advantage, torch.zeros_like(advantage)),
    }
