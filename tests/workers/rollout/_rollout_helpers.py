"""Plain helpers for rollout tests (imported by the test modules; fixtures live in conftest.py)."""

from __future__ import annotations

import torch

from verl.workers.config import RolloutConfig


def rollout_config(**overrides) -> RolloutConfig:
    """A RolloutConfig small enough for CPU tests."""
    values = dict(
        name="hf",
        prompt_length=32,
        response_length=48,
        max_num_seqs=4,
        calculate_log_probs=True,
        dtype="float32",
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        do_sample=True,
        ignore_eos=False,
        max_model_len=None,
    )
    values.update(overrides)
    return RolloutConfig(**values)


def random_prompts(count: int, vocab_size: int, min_len: int = 2, max_len: int = 20, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (count,), generator=gen).tolist()
    return [torch.randint(3, vocab_size, (n,), generator=gen).tolist() for n in lengths]


@torch.no_grad()
def reference_greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy decoding by full forward passes without any cache: the ground truth for the engine."""
    ids = list(prompt)
    for _ in range(max_tokens):
        logits = model(torch.tensor([ids])).logits[0, -1]
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt) :]


@torch.no_grad()
def reference_log_probs(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    """Log-probs of ``response`` tokens from one full forward pass over prompt + response."""
    ids = torch.tensor([prompt + response])
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response).unsqueeze(1)).squeeze(1)
